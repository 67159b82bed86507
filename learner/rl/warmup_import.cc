#include "learner/rl/warmup_import.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "google/protobuf/text_format.h"
#include "learner/rl/ingest.h"
#include "learner/rl/ledger.h"
#include "proto/learner.pb.h"

namespace kernelrl::learner::rl {

namespace {

// The accepted trajectories of `stage` ("" = any) of the job in `job_dir`,
// after the tokenizer check.
absl::StatusOr<std::vector<v1::Trajectory>> ReadAccepted(const std::string& job_dir, const std::string& base_checkpoint,
                                                         const std::string& stage,
                                                         const std::set<std::string>& task_ids, int64_t max) {
  auto job_text = ReadFileToString(job_dir + "/job.textproto");
  if (!job_text.ok()) return job_text.status();
  v1::Job job;
  if (!google::protobuf::TextFormat::ParseFromString(*job_text, &job)) {
    return absl::DataLossError(job_dir + "/job.textproto: not a kernelrl.v1.Job");
  }
  const std::string theirs_path = job.spec().base_checkpoint() + "/tokenizer.json";
  auto theirs = ReadFileToString(theirs_path);
  if (!theirs.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("cannot check the tokenizer of ", job_dir, " (", theirs_path,
                                                      "): ", theirs.status().message()));
  }
  auto ours = ReadFileToString(base_checkpoint + "/tokenizer.json");
  if (!ours.ok()) return ours.status();
  if (*theirs != *ours) {
    return absl::FailedPreconditionError(absl::StrCat("the trajectories of ", job.id(), " were tokenized by ", theirs_path,
                                                      ", not by this job's ", base_checkpoint, "/tokenizer.json"));
  }
  auto records = Ledger::Read(job_dir + "/ledger.jsonl");
  if (!records.ok()) return records.status();
  std::vector<v1::Trajectory> out;
  for (const v1::LedgerRecord& r : *records) {
    if (static_cast<int64_t>(out.size()) >= max) break;
    if (r.kind() != v1::LedgerRecord::ACCEPTED || (!stage.empty() && r.stage() != stage)) continue;
    if (!task_ids.empty() && !task_ids.count(r.task_id())) continue;
    auto t = Ingest::ReadTrajectory(job_dir, r.trajectory_id());
    if (!t.ok()) return t.status();
    out.push_back(*std::move(t));
  }
  if (out.empty()) {
    return absl::NotFoundError(absl::StrCat(job_dir, " holds no accepted ", stage.empty() ? "" : stage + " ",
                                            "trajectory of this job's tasks"));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<v1::Trajectory>> ReadWarmupSet(const std::string& job_dir,
                                                          const std::string& base_checkpoint,
                                                          const std::set<std::string>& task_ids, int64_t max) {
  if (task_ids.empty()) return absl::NotFoundError(job_dir + ": this job has no tasks to take a warm-up of");
  return ReadAccepted(job_dir, base_checkpoint, "agent_warmup", task_ids, max);
}

absl::StatusOr<std::vector<v1::Trajectory>> ReadAcceptedTrajectories(const std::string& job_dir,
                                                                     const std::string& base_checkpoint,
                                                                     const std::set<std::string>& task_ids) {
  return ReadAccepted(job_dir, base_checkpoint, "", task_ids, std::numeric_limits<int64_t>::max());
}

}  // namespace kernelrl::learner::rl
