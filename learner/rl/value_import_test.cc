// Value pretraining on earlier jobs' returns (ValuePretrainConfig.import_job_dirs):
// a job whose only stage is value pretraining takes the accepted trajectories
// of two earlier jobs (every stage's, this job's tasks only, each once),
// leases nothing, trains the critic to the step cap on batches that mix the
// jobs and reports how many it imported; a job on another tokenizer is refused,
// naming the field.
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/testing/testing.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "learner/model.h"
#include "learner/rl/ingest.h"
#include "learner/rl/jobs.h"
#include "learner/rl/job_config.h"
#include "learner/rl/ledger.h"
#include "learner/rl/recipe.h"
#include "learner/rl/warmup_import.h"
#include "learner/test_util.h"
#include "proto/learner.pb.h"
#include "proto/verdict.pb.h"

namespace kernelrl::learner::rl {
namespace {

using ::kernelrl::testing::NewTempDir;

constexpr int kVocab = 64;

std::vector<v1::Task> Tasks(const std::vector<std::string>& ids) {
  std::vector<v1::Task> tasks(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) tasks[i].set_id(ids[i]);
  return tasks;
}

// A model rollout whose reward follows its first model token, so the returns
// are there to learn.
v1::Trajectory Rollout(const v1::TaskLease& lease, std::mt19937* rng, int fixed_reward) {
  v1::Trajectory t;
  t.set_id(absl::StrCat(lease.lease_id(), "-", (*rng)()));
  t.set_task_id(lease.task().id());
  t.set_job_id(lease.job_id());
  t.set_policy_version(lease.policy_version());
  int first = -1;
  for (int i = 0; i < 12; ++i) {
    const int32_t id = static_cast<int32_t>((*rng)() % kVocab);
    if (i == 4) first = id;
    t.add_token_ids(id);
    t.add_loss_mask(i >= 4);
    t.add_logprobs(i >= 4 ? -4.0f : 0.0f);
  }
  const int reward = fixed_reward != 0 ? fixed_reward : first < kVocab / 2 ? 2 : -1;
  t.set_reward(reward);
  t.mutable_final_verdict()->set_outcome(reward > 0 ? v1::Verdict::OK : v1::Verdict::WRONG_ANSWER);
  t.mutable_sampling()->set_policy("model");
  return t;
}

// An earlier job on `base`: `n` rollouts in each of agent_warmup and
// agentic_ppo over `tasks` (each paying `fixed_reward` when not 0). Returns the
// accepted trajectories' task ids.
std::vector<std::string> EarlierJob(const std::string& dir, const std::string& id, const std::string& base,
                                    const std::vector<std::string>& tasks, int n, unsigned seed,
                                    int fixed_reward = 0) {
  std::mt19937 rng(seed);
  std::vector<std::string> accepted;
  IngestOptions options;
  options.vocab_size = kVocab;
  auto in = Ingest::Open(dir, id, options, 0);
  EXPECT_TRUE(in.ok()) << in.status();
  for (const char* stage : {"agent_warmup", "agentic_ppo"}) {
    (*in)->SetStage(stage, Tasks(tasks), 1, n, false, {"model"});
    auto leases = (*in)->Lease("actor", n);
    EXPECT_TRUE(leases.ok()) << leases.status();
    for (const auto& l : *leases) {
      if ((*in)->Push(l.lease_id(), Rollout(l, &rng, fixed_reward)).accepted()) accepted.push_back(l.task().id());
    }
  }
  v1::Job job;
  job.set_id(id);
  job.mutable_spec()->set_base_checkpoint(base);
  std::string text;
  google::protobuf::TextFormat::PrintToString(job, &text);
  EXPECT_TRUE(WriteFileAtomically(dir + "/job.textproto", text).ok());
  return accepted;
}

struct Fixture {
  std::string root, base, other_base;
  std::vector<std::string> earlier;  // job directories
  int ours = 0;                      // their accepted trajectories of this job's tasks
};

Fixture Make() {
  Fixture f;
  f.root = NewTempDir("value_import_");
  f.base = f.root + "/base", f.other_base = f.root + "/other";
  auto model = Transformer::Create(learner::testing::TinyQwen2Config(kVocab), Head::kLanguageModel, ModelOptions{}, 5);
  EXPECT_TRUE(model.ok()) << model.status();
  for (const std::string& b : {f.base, f.other_base}) {
    EXPECT_EQ(::mkdir(b.c_str(), 0755), 0);
    EXPECT_TRUE((*model)->Save(b).ok());
  }
  EXPECT_TRUE(WriteFileAtomically(f.base + "/tokenizer.json", R"({"model": "bpe-1"})").ok());
  EXPECT_TRUE(WriteFileAtomically(f.other_base + "/tokenizer.json", R"({"model": "bpe-2"})").ok());
  EXPECT_TRUE(WriteFileAtomically(f.root + "/tasks.jsonl", "{\"id\": \"fam/t0\"}\n{\"id\": \"fam/t1\"}\n").ok());
  // Two earlier seeds; the second also ran a task this job does not have.
  const std::vector<std::vector<std::string>> their_tasks = {{"fam/t0", "fam/t1"}, {"fam/t0", "fam/t1", "fam/t9"}};
  for (int j = 0; j < 2; ++j) {
    const std::string dir = absl::StrCat(f.root, "/earlier-", j);
    for (const std::string& task : EarlierJob(dir, absl::StrCat("job-", j), f.base, their_tasks[j], 12, 11 + j)) {
      f.ours += task != "fam/t9";
    }
    f.earlier.push_back(dir);
  }
  return f;
}

// Runs one job to its end; returns it and its ledger's records.
v1::Job RunJob(const std::string& root, const std::string& base, const std::string& hyper,
               std::vector<v1::LedgerRecord>* records) {
  auto m = JobManager::Open(root + "/state", [] { return MakeRecipeRunner(nullptr); }, nullptr);
  EXPECT_TRUE(m.ok()) << m.status();
  v1::JobSpec spec;
  spec.set_name("value_import_test");
  spec.set_base_checkpoint(base);
  spec.set_task_set(root + "/tasks.jsonl");
  spec.set_hyperparameters_text(hyper);
  auto job = (*m)->Submit(spec);
  EXPECT_TRUE(job.ok()) << job.status();
  int64_t rev = -1;
  v1::Job now;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!(*m)->WaitForChange(job->id(), &rev, absl::Milliseconds(200), &now).ok()) continue;
    if (JobManager::Finished(now.state())) break;
  }
  auto r = Ledger::Read(root + "/state/jobs/" + job->id() + "/ledger.jsonl");
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) *records = *std::move(r);
  return now;
}

std::string Hyper(const std::vector<std::string>& dirs, int steps = 4, int batches_per_update = 1) {
  std::string h = absl::StrCat(
      "recipe { single_turn_ppo { skip: true } agent_warmup { skip: true } rft { skip: true }"
      " agentic_ppo { skip: true } value_pretrain { steps: ", steps, " batches_per_update: ", batches_per_update,
      " min_explained_variance: 1");
  for (const std::string& d : dirs) absl::StrAppend(&h, " import_job_dirs: \"", d, "\"");
  return h +
         " } }"
         " batch { trajectories_per_step: 4 max_tokens_per_row: 64 max_trajectory_tokens: 64"
         " activation_checkpointing: false }"
         " critic_optimizer { lr: 1e-3 } device { device: \"cpu\" dtype: \"float32\" }";
}

TEST(ValueImportTest, ReadsEveryStagesAcceptedTrajectoriesOfThisJobsTasks) {
  const Fixture f = Make();
  if (::testing::Test::HasFailure()) return;
  auto all = ReadAcceptedTrajectories(f.earlier[1], f.base, {});
  ASSERT_TRUE(all.ok()) << all.status();
  auto ours = ReadAcceptedTrajectories(f.earlier[1], f.base, {"fam/t0", "fam/t1"});
  ASSERT_TRUE(ours.ok()) << ours.status();
  EXPECT_GT(all->size(), ours->size());  // fam/t9's are left out
  for (const v1::Trajectory& t : *ours) EXPECT_NE(t.task_id(), "fam/t9");
  // Both stages' trajectories: the warm-up reader takes only the first half.
  auto warmup = ReadWarmupSet(f.earlier[1], f.base, {"fam/t0", "fam/t1"}, 1000);
  ASSERT_TRUE(warmup.ok()) << warmup.status();
  EXPECT_LT(warmup->size(), ours->size());
  auto wrong = ReadAcceptedTrajectories(f.earlier[1], f.other_base, {});
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition) << wrong.status();
  auto none = ReadAcceptedTrajectories(f.earlier[1], f.base, {"fam/absent"});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound) << none.status();
}

TEST(ValueImportTest, AJobPretrainsItsCriticOnEarlierJobsReturnsLeasingNothing) {
  const Fixture f = Make();
  if (::testing::Test::HasFailure()) return;
  // The first job named twice: each trajectory is taken once.
  std::vector<v1::LedgerRecord> records;
  const v1::Job job = RunJob(f.root, f.base, Hyper({f.earlier[0], f.earlier[1], f.earlier[0]}), &records);
  ASSERT_EQ(job.state(), v1::Job::SUCCEEDED) << job.message();
  int updates = 0;
  for (const v1::LedgerRecord& r : records) {
    EXPECT_NE(r.kind(), v1::LedgerRecord::LEASED) << "value pretraining on imported returns leased a task";
    if (r.kind() != v1::LedgerRecord::UPDATE) continue;
    ASSERT_EQ(r.stage(), "value_pretrain");
    ++updates;
    EXPECT_EQ(r.metrics().at("value_pretrain_imported"), f.ours);
    EXPECT_TRUE(r.metrics().count("value_pretrain_heldout_ev"));
    EXPECT_TRUE(r.metrics().count("explained_variance_task_means"));  // What the task line alone explains.
    EXPECT_GT(r.metrics().at("value_loss"), 0);
  }
  EXPECT_EQ(updates, 4);  // The cap: a level of 1 is never reached.
}

// Two earlier jobs of one reward each: in ledger order every batch of the first
// steps would hold one job's returns; shuffled, the batches mix them.
TEST(ValueImportTest, BatchesMixTheEarlierJobs) {
  const Fixture f = Make();
  if (::testing::Test::HasFailure()) return;
  std::vector<std::string> dirs;
  for (int j = 0; j < 2; ++j) {
    dirs.push_back(absl::StrCat(f.root, "/fixed-", j));
    EarlierJob(dirs.back(), absl::StrCat("fixed-", j), f.base, {"fam/t0", "fam/t1"}, 12, 21 + j, j == 0 ? -1 : 2);
  }
  std::vector<v1::LedgerRecord> records;
  const v1::Job job = RunJob(f.root, f.base, Hyper(dirs), &records);
  ASSERT_EQ(job.state(), v1::Job::SUCCEEDED) << job.message();
  int updates = 0, mixed = 0;
  for (const v1::LedgerRecord& r : records) {
    if (r.kind() != v1::LedgerRecord::UPDATE) continue;
    ++updates;
    mixed += r.metrics().at("reward_min") != r.metrics().at("reward_max");
  }
  EXPECT_EQ(updates, 4);
  EXPECT_GT(mixed, 0) << "every value step trained on one earlier job's returns: the imported set was not shuffled";
}

// Three batches an update over two updates train the critic as six updates of one batch do (the
// same batches in the same order), with two checkpoints instead of six.
TEST(ValueImportTest, SeveralBatchesAnUpdateTrainAsManyUpdatesOfOne) {
  const Fixture f = Make();
  if (::testing::Test::HasFailure()) return;
  for (const char* sub : {"/one", "/three"}) {
    ASSERT_EQ(::mkdir((f.root + sub).c_str(), 0755), 0);
    ASSERT_TRUE(WriteFileAtomically(f.root + sub + "/tasks.jsonl", "{\"id\": \"fam/t0\"}\n{\"id\": \"fam/t1\"}\n").ok());
  }
  std::vector<v1::LedgerRecord> by_one, by_three;
  const v1::Job one = RunJob(f.root + "/one", f.base, Hyper(f.earlier, 6, 1), &by_one);
  const v1::Job three = RunJob(f.root + "/three", f.base, Hyper(f.earlier, 2, 3), &by_three);
  ASSERT_EQ(one.state(), v1::Job::SUCCEEDED) << one.message();
  ASSERT_EQ(three.state(), v1::Job::SUCCEEDED) << three.message();
  auto updates = [](const std::vector<v1::LedgerRecord>& records) {
    std::vector<v1::LedgerRecord> out;
    for (const v1::LedgerRecord& r : records) {
      if (r.kind() == v1::LedgerRecord::UPDATE) out.push_back(r);
    }
    return out;
  };
  const std::vector<v1::LedgerRecord> u1 = updates(by_one), u3 = updates(by_three);
  ASSERT_EQ(u1.size(), 6u);
  ASSERT_EQ(u3.size(), 2u);
  EXPECT_EQ(u3[1].metrics().at("value_pretrain_batches"), 3);
  EXPECT_EQ(u1[5].metrics().at("value_pretrain_batches"), 1);
  // The sixth critic step in both: the same batch, before it trains, and the same critic after it.
  for (const char* k : {"explained_variance", "value_loss", "value_pretrain_heldout_ev"}) {
    EXPECT_NEAR(u3[1].metrics().at(k), u1[5].metrics().at(k), 1e-4 * (1 + std::abs(u1[5].metrics().at(k)))) << k;
  }
  EXPECT_NE(u1[1].metrics().at("value_loss"), u1[5].metrics().at("value_loss"));  // the steps differ at all

  auto fresh = ParseJobConfig("recipe { value_pretrain { batches_per_update: 2 } }");
  EXPECT_EQ(fresh.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(fresh.status().message().find("batches_per_update"), std::string::npos) << fresh.status();
}

TEST(ValueImportTest, AnotherTokenizerOrASecondSourceIsRefusedNamingTheField) {
  const Fixture f = Make();
  if (::testing::Test::HasFailure()) return;
  std::vector<v1::LedgerRecord> records;
  const v1::Job job = RunJob(f.root, f.other_base, Hyper({f.earlier[0]}), &records);
  EXPECT_EQ(job.state(), v1::Job::FAILED);
  EXPECT_NE(job.message().find("recipe.value_pretrain.import_job_dirs"), std::string::npos) << job.message();
  EXPECT_NE(job.message().find("tokenized by"), std::string::npos) << job.message();

  auto both = ParseJobConfig(
      "recipe { value_pretrain { use_warmup_trajectories: true import_job_dirs: \"/a\" } }");
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(both.status().message().find("import_job_dirs"), std::string::npos) << both.status();
  auto empty = ParseJobConfig("recipe { value_pretrain { import_job_dirs: \"\" } }");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kernelrl::learner::rl
