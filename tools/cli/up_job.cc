#include "tools/cli/up_job.h"

#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "google/protobuf/text_format.h"
#include "common/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "learner/rl/jobs.h"
#include "proto/learner.grpc.pb.h"

namespace kernelrl::up {
namespace {

// Two agentic PPO updates of two trajectories each (on the GPU if any), the earlier
// recipe stages skipped: enough to see leases, rollouts, verdicts, an update
// and a new policy version in a minute or two.
constexpr char kQuickstart[] = R"pb(
  name: "quickstart"
  max_steps: 2
  rollouts_per_task: 1
)pb";
constexpr char kQuickstartHyperparameters[] = R"pb(
  recipe {
    single_turn_ppo { skip: true }
    agent_warmup { skip: true }
    rft { skip: true }
    value_pretrain { skip: true }
    # The scripted policy's rollouts (placeholder log-probs): a plumbing job.
    agentic_ppo { steps: 2 max_turns: 8 take_policies: "scripted" }
  }
  batch { trajectories_per_step: 2 }
  # The scripted policy samples with one fixed version: every trajectory is
  # off-policy by construction, so the staleness bound must not reject it.
  ingest { max_policy_lag: 1000 }
)pb";

std::unique_ptr<grpc::ClientContext> ContextUntil(absl::Time deadline) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(deadline));
  return ctx;
}

}  // namespace

v1::JobSpec QuickstartJobSpec(const std::string& base_checkpoint, const std::string& task_set, bool gpu) {
  v1::JobSpec spec;
  google::protobuf::TextFormat::ParseFromString(kQuickstart, &spec);
  spec.set_base_checkpoint(base_checkpoint);
  spec.set_task_set(task_set);
  spec.set_hyperparameters_text(absl::StrCat(kQuickstartHyperparameters, " device { device: \"",
                                             gpu ? "cuda" : "cpu", "\" dtype: \"float32\" }"));
  return spec;
}

std::string ProgressLine(const v1::Job& job) {
  std::string line = absl::StrFormat("%-9s step %d  policy v%d", v1::Job::State_Name(job.state()), job.step(),
                                     job.policy_version());
  if (!job.message().empty()) absl::StrAppend(&line, "  (", job.message(), ")");
  // Sorted, so the same state prints the same line (lines are de-duplicated).
  const std::map<std::string, double> metrics(job.metrics().begin(), job.metrics().end());
  if (!metrics.empty()) {
    absl::StrAppend(&line, "  |",
                    absl::StrJoin(metrics, "", [](std::string* out, const std::pair<const std::string, double>& m) {
                      absl::StrAppend(out, " ", m.first, "=", absl::StrFormat("%.4g", m.second));
                    }));
  }
  return line;
}

std::string FinalReport(const v1::Job& job, absl::Duration took) {
  std::string r = absl::StrFormat("job %s (%s): %s after %s\n", job.id(), job.spec().name(),
                                  v1::Job::State_Name(job.state()), absl::FormatDuration(absl::Trunc(took, absl::Seconds(1))));
  absl::StrAppendFormat(&r, "  steps          %d\n  policy version %d\n", job.step(), job.policy_version());
  if (!job.message().empty()) absl::StrAppend(&r, "  message        ", job.message(), "\n");
  const std::map<std::string, double> metrics(job.metrics().begin(), job.metrics().end());
  for (const auto& [name, value] : metrics) absl::StrAppendFormat(&r, "  %-14s %.6g\n", name, value);
  return r;
}

absl::StatusOr<v1::Job> RunJob(const std::string& address, const v1::JobSpec& spec, absl::Time deadline,
                               absl::Duration stall, const std::atomic<bool>& stop,
                               const std::function<void(const std::string&)>& print) {
  auto stub = v1::Learner::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = spec;
  v1::Job job;
  // Only UNAVAILABLE is retried (the learner is not listening yet or restarting):
  // the request never reached it, so a retry cannot submit the job twice.
  while (true) {
    auto ctx = ContextUntil(std::min(deadline, absl::Now() + absl::Seconds(10)));
    const grpc::Status s = stub->SubmitJob(ctx.get(), submit, &job);
    if (s.ok()) break;
    if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      return absl::UnimplementedError("the learner does not serve the job API (Learner.SubmitJob)");
    }
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE || absl::Now() >= deadline || stop) {
      return FromGrpcStatus(s, "SubmitJob");
    }
    absl::SleepFor(absl::Milliseconds(500));
  }
  print(absl::StrCat("submitted job ", job.id(), " (", spec.name(), ")"));
  std::string last_line;
  absl::Time last_change = absl::Now();
  bool cancelled = false, unreachable = false;
  v1::GetJobRequest get;
  get.set_job_id(job.id());
  while (true) {
    if (stop && !cancelled) {
      v1::CancelJobRequest cancel;
      cancel.set_job_id(job.id());
      cancel.set_reason("kernelrl up was stopped");
      v1::Job ignored;
      auto ctx = ContextUntil(absl::Now() + absl::Seconds(5));
      stub->CancelJob(ctx.get(), cancel, &ignored);
      cancelled = true;
    }
    // Watch in slices of a few seconds, so `stop` is seen while the job is quiet.
    auto ctx = ContextUntil(std::min(deadline, absl::Now() + absl::Seconds(3)));
    auto reader = stub->WatchJob(ctx.get(), get);
    while (reader->Read(&job)) {
      if (unreachable) print("learner reachable again; following the job");
      unreachable = false;
      const std::string line = ProgressLine(job);
      if (line != last_line) {
        print(line);
        last_change = absl::Now();
      }
      last_line = line;
      if (learner::rl::JobManager::Finished(job.state())) {
        ctx->TryCancel();
        reader->Finish();
        return job;
      }
    }
    const grpc::Status s = reader->Finish();
    if (job.paused()) last_change = absl::Now();  // Held by PauseJob (kernelrl job pause): waiting, not stalled.
    if (absl::Now() - last_change > stall) {
      return absl::DeadlineExceededError(absl::StrCat("job ", job.id(), " made no progress for ",
                                                      absl::FormatDuration(stall), " (are the actors leasing tasks? ",
                                                      "see their logs)"));
    }
    if (absl::Now() >= deadline) return absl::DeadlineExceededError(absl::StrCat("job ", job.id(), " still ", v1::Job::State_Name(job.state())));
    switch (s.error_code()) {
      case grpc::StatusCode::OK:
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        break;
      case grpc::StatusCode::UNAVAILABLE:
      case grpc::StatusCode::CANCELLED:  // The learner shut down mid-stream (drain).
        if (!unreachable) print(absl::StrCat("learner unreachable (", s.error_message(), "); waiting for its restart"));
        unreachable = true;
        absl::SleepFor(absl::Milliseconds(300));
        break;
      default:
        return absl::Status(static_cast<absl::StatusCode>(s.error_code()), "WatchJob: " + s.error_message());
    }
  }
}

}  // namespace kernelrl::up
