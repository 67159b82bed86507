// A later job takes an earlier job's warm-up set: the earlier job's ledger
// decides which trajectories (accepted in agent_warmup, this job's tasks, in
// order), the tokenizers must match, and the import survives a restart.
#include "learner/rl/warmup_import.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/testing/testing.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "learner/rl/ingest.h"
#include "proto/learner.pb.h"
#include "proto/verdict.pb.h"

namespace kernelrl::learner::rl {
namespace {

using ::kernelrl::testing::NewTempDir;

std::vector<v1::Task> Tasks(int n) {
  std::vector<v1::Task> tasks(n);
  for (int i = 0; i < n; ++i) tasks[i].set_id(absl::StrCat("family/t", i));
  return tasks;
}

v1::Trajectory Rollout(const v1::TaskLease& lease, const std::string& policy, std::mt19937* rng) {
  v1::Trajectory t;
  t.set_id(absl::StrCat(lease.lease_id(), "-", (*rng)()));
  t.set_task_id(lease.task().id());
  t.set_job_id(lease.job_id());
  t.set_policy_version(lease.policy_version());
  for (int i = 0; i < 6; ++i) {
    t.add_token_ids(static_cast<int32_t>((*rng)() % 50));
    t.add_loss_mask(i >= 3);
    t.add_logprobs(0);
  }
  t.set_reward(static_cast<int>((*rng)() % 3));
  t.mutable_final_verdict()->set_outcome(v1::Verdict::OK);
  t.mutable_sampling()->set_policy(policy);
  return t;
}

void WriteBase(const std::string& dir, const std::string& tokenizer) {
  ASSERT_TRUE(WriteFileAtomically(dir + "/tokenizer.json", tokenizer).ok());
}

// An earlier job: 2 single-turn PPO rollouts of the model, then 5 warm-up
// trajectories of the engineer over 3 tasks. Returns the warm-up ids in order.
std::vector<std::string> EarlierJob(const std::string& job_dir, const std::string& base) {
  std::mt19937 rng(7);
  std::vector<std::string> warmup;
  auto in = Ingest::Open(job_dir, "job-a", {}, 0);
  EXPECT_TRUE(in.ok()) << in.status();
  (*in)->SetStage("single_turn_ppo", Tasks(3), 1, 2);
  auto model_leases = (*in)->Lease("model-actor", 2);
  EXPECT_TRUE(model_leases.ok());
  for (const auto& l : *model_leases) EXPECT_TRUE((*in)->Push(l.lease_id(), Rollout(l, "", &rng)).accepted());
  (*in)->SetStage("agent_warmup", Tasks(3), 1, 5, false, {"scripted"});
  auto engineer_leases = (*in)->Lease("engineer", 5);
  EXPECT_TRUE(engineer_leases.ok());
  for (const auto& l : *engineer_leases) {
    v1::Trajectory t = Rollout(l, "scripted", &rng);
    EXPECT_TRUE((*in)->Push(l.lease_id(), t).accepted());
    warmup.push_back(t.id());
  }
  v1::Job job;
  job.set_id("job-a");
  job.mutable_spec()->set_base_checkpoint(base);
  std::string text;
  google::protobuf::TextFormat::PrintToString(job, &text);
  EXPECT_TRUE(WriteFileAtomically(job_dir + "/job.textproto", text).ok());
  return warmup;
}

TEST(WarmupImportTest, ALaterJobTakesTheWarmupSetAndKeepsItAcrossARestart) {
  const std::string root = NewTempDir("warmup_import_");
  const std::string base = root + "/base";
  ::mkdir(base.c_str(), 0755);
  WriteBase(base, R"({"model": "bpe-1"})");
  const std::vector<std::string> warmup = EarlierJob(root + "/job-a", base);
  ASSERT_EQ(warmup.size(), 5u);

  // Tasks t0..t2 of the warm-up; this job has t0 and t1 only, and takes at most 3.
  std::set<std::string> ours = {"family/t0", "family/t1"};
  auto set = ReadWarmupSet(root + "/job-a", base, ours, 3);
  ASSERT_TRUE(set.ok()) << set.status();
  std::vector<std::string> expected;
  for (const std::string& id : warmup) {
    auto bytes = ReadFileToString(Ingest::TrajectoryFile(root + "/job-a", id));
    ASSERT_TRUE(bytes.ok());
    v1::Trajectory t;
    ASSERT_TRUE(t.ParseFromString(*bytes));
    if (ours.count(t.task_id()) && expected.size() < 3) expected.push_back(id);
  }
  ASSERT_FALSE(expected.empty());
  ASSERT_EQ(set->size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ((*set)[i].id(), expected[i]);
    EXPECT_EQ((*set)[i].sampling().policy(), "scripted");  // Never the model's single-turn rollouts.
  }

  IngestOptions options;
  options.vocab_size = 50;
  {
    auto in = Ingest::Open(root + "/job-b", "job-b", options, 0);
    ASSERT_TRUE(in.ok()) << in.status();
    for (const v1::Trajectory& t : *set) {
      auto imported = (*in)->Import("agent_warmup", t, root + "/job-a");
      ASSERT_TRUE(imported.ok()) << imported.status();
      EXPECT_TRUE(*imported);
    }
    auto again = (*in)->Import("agent_warmup", set->front(), root + "/job-a");
    ASSERT_TRUE(again.ok());
    EXPECT_FALSE(*again);  // Already there.
  }
  // A restart replays the import from the ledger: the same set, in order.
  auto in = Ingest::Open(root + "/job-b", "job-b", options, 0);
  ASSERT_TRUE(in.ok()) << in.status();
  auto accepted = (*in)->AcceptedIn("agent_warmup");
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  ASSERT_EQ(accepted->size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ((*accepted)[i].id(), expected[i]);
}

TEST(WarmupImportTest, RefusesAnotherTokenizerAMissingOneOrNothingToTake) {
  const std::string root = NewTempDir("warmup_import_refuse_");
  const std::string base = root + "/base", other = root + "/other";
  ::mkdir(base.c_str(), 0755);
  ::mkdir(other.c_str(), 0755);
  WriteBase(base, R"({"model": "bpe-1"})");
  WriteBase(other, R"({"model": "bpe-2"})");
  EarlierJob(root + "/job-a", base);
  const std::set<std::string> all = {"family/t0", "family/t1", "family/t2"};

  auto wrong = ReadWarmupSet(root + "/job-a", other, all, 10);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition) << wrong.status();
  EXPECT_NE(wrong.status().message().find("tokenized by"), std::string::npos) << wrong.status();

  ASSERT_EQ(::unlink((base + "/tokenizer.json").c_str()), 0);
  auto gone = ReadWarmupSet(root + "/job-a", other, all, 10);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kFailedPrecondition) << gone.status();
  WriteBase(base, R"({"model": "bpe-1"})");

  auto none = ReadWarmupSet(root + "/job-a", base, {"family/not_a_task"}, 10);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound) << none.status();
  auto no_job = ReadWarmupSet(root + "/nowhere", base, all, 10);
  EXPECT_FALSE(no_job.ok());

  // Token ids beyond this job's vocabulary, and infra errors, are refused at import.
  auto set = ReadWarmupSet(root + "/job-a", base, all, 10);
  ASSERT_TRUE(set.ok()) << set.status();
  IngestOptions small;
  small.vocab_size = 10;
  auto in = Ingest::Open(root + "/job-c", "job-c", small, 0);
  ASSERT_TRUE(in.ok());
  bool refused = false;
  for (const v1::Trajectory& t : *set) refused |= !(*in)->Import("agent_warmup", t, "job-a").ok();
  EXPECT_TRUE(refused);
  v1::Trajectory infra = set->front();
  infra.set_id("infra");
  infra.mutable_final_verdict()->set_outcome(v1::Verdict::INFRA_ERROR);
  IngestOptions wide;
  wide.vocab_size = 50;
  auto in2 = Ingest::Open(root + "/job-d", "job-d", wide, 0);
  ASSERT_TRUE(in2.ok());
  EXPECT_FALSE((*in2)->Import("agent_warmup", infra, "job-a").ok());
}

}  // namespace
}  // namespace kernelrl::learner::rl
