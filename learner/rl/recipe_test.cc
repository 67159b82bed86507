// The recipe end to end through the job API, with a tiny random HF-format
// checkpoint this test writes and a fake actor (leases tasks, pushes random
// trajectories with rewards, tool calls, loops and infra errors) in place of
// the actor service. The learner runs in a child process (this binary with
// --role=learner) that the test kills with SIGKILL when the job reaches
// agent_warmup, value_pretrain and agentic_ppo, then starts again: each
// incarnation resumes from the last checkpoint and the ledger, and loads that
// checkpoint into its policy engine (the fake actor tags its trajectories with
// the engine's version, as a real actor sampling from it does).
//
// Checked at the end: the job SUCCEEDED; every stage left its output (PPO
// steps in both PPO stages, warm-up trajectories, RFT steps that move the
// policy and not the critic, value steps that move the critic and not the
// policy); the ledger shows every trained trajectory trained exactly once,
// no infra-error trajectory trained and each committed update's UPDATE record
// (but for one a kill cut between its checkpoint and that record); the last
// incarnation's /metrics scrape has the learner's metrics with plausible values.
#include "learner/rl/recipe.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file.h"
#include "common/metrics.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "common/testing/testing.h"
#include "gtest/gtest.h"
#include "learner/checkpoint.h"
#include "learner/model.h"
#include "learner/policy/engine.h"
#include "learner/sync/weight_sink.h"
#include "learner/rl/jobs.h"
#include "learner/rl/learner_metrics.h"
#include "learner/test_util.h"

namespace kernelrl::learner::rl {
namespace {

constexpr int kVocab = 64;
constexpr int kPerStep = 4;  // batch.trajectories_per_step
constexpr int kSingleTurnSteps = 3, kWarmup = 12, kRftEpochs = 2, kValueSteps = 3, kAgenticSteps = 3;

const char kHyperparameters[] = R"pb(
  recipe {
    single_turn_ppo { steps: 3 max_turns: 1 }
    agent_warmup { steps: 12 max_turns: 8 }
    rft { epochs: 2 max_repeated_calls: 3 lr: 1e-3 }
    # The fake actor's rewards are noise: the critic cannot reach the level; the cap ends the stage.
    value_pretrain { steps: 3 min_explained_variance: 1 }
    agentic_ppo { steps: 3 max_turns: 8 }
  }
  batch { trajectories_per_step: 4 max_tokens_per_row: 64 max_trajectory_tokens: 256 activation_checkpointing: false }
  # Lag 2: a restarted learner whose policy server kept the base weights (version 0) gets only stale
  # trajectories from the fake actor, which tags them with the server's version, and stalls.
  ingest { max_policy_lag: 2 lease_timeout_seconds: 5 max_infra_reruns: 2 }
  # Each PPO update's critic also takes one step on its batch and the stage's batch before it.
  ppo { critic_replay_batches: 2 }
  actor_optimizer { lr: 1e-3 }
  critic_optimizer { lr: 1e-3 }
  device { device: "cpu" dtype: "float32" peak_tflops: 0.1 }
  checkpoint { keep_last: 1000 }
)pb";

using ::kernelrl::testing::NewTempDir;
using ::kernelrl::testing::ParseScrape;

std::string Call(const std::string& cmd) {
  return "Let me run it.\n<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"" + cmd +
         "\"}}\n</tool_call>";
}

// One rollout for a lease: random tokens (a prompt, then assistant and tool
// turns), rollout log-probs on the model tokens, a reward; one in eight is a
// redundant loop, one in ten an infra error.
v1::Trajectory FakeRollout(const v1::TaskLease& lease, int64_t version, std::mt19937_64& rng) {
  v1::Trajectory t;
  t.set_id(absl::StrCat(lease.lease_id(), "-", rng() % 1000000007));
  t.set_task_id(lease.task().id());
  t.set_job_id(lease.job_id());
  t.set_policy_version(version);
  int max_turns = 1;
  if (auto it = lease.task().metadata().find("max_turns"); it != lease.task().metadata().end()) {
    (void)absl::SimpleAtoi(it->second, &max_turns);
  }
  const int turns = 1 + static_cast<int>(rng() % std::min(max_turns, 4));
  const bool loop = max_turns > 1 && rng() % 8 == 0;
  const int prompt = 3 + static_cast<int>(rng() % 5);
  for (int i = 0; i < prompt; ++i) {
    t.add_token_ids(static_cast<int32_t>(rng() % kVocab)), t.add_logprobs(0), t.add_loss_mask(0);
  }
  for (int k = 0; k < turns; ++k) {
    v1::Turn* a = t.add_turns();
    a->set_role(v1::Turn::ASSISTANT);
    a->set_content(loop ? Call("python verify.py") + Call("python verify.py") + Call("python verify.py") +
                              Call("python verify.py")
                        : Call(absl::StrCat("nvcc k", k, ".cu")));
    a->set_policy_version(version);
    const int n = 2 + static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) {
      t.add_token_ids(static_cast<int32_t>(rng() % kVocab));
      // About what the tiny random policy gives a token (1/kVocab), within the mismatch band.
      t.add_logprobs(-std::log(static_cast<float>(kVocab)) + static_cast<float>(rng() % 1000) / 1000.0f - 0.5f);
      t.add_loss_mask(1);
    }
    if (k + 1 < turns) {
      v1::Turn* tool = t.add_turns();
      tool->set_role(v1::Turn::TOOL);
      tool->set_content("ok");
      for (int i = 0; i < 3; ++i) t.add_token_ids(static_cast<int32_t>(rng() % kVocab)), t.add_logprobs(0), t.add_loss_mask(0);
    }
  }
  static const double kRewards[] = {-1, 1, 2, 3};
  t.set_reward(kRewards[rng() % 4]);
  t.mutable_final_verdict()->set_outcome(rng() % 10 == 0 ? v1::Verdict::INFRA_ERROR
                                         : t.reward() > 0 ? v1::Verdict::OK
                                                          : v1::Verdict::WRONG_ANSWER);
  t.mutable_stats()->set_num_turns(turns);
  return t;
}

// Samples "with" the policy server's weights, as a real actor does: its
// trajectories carry the engine's version, not the one the lease names.
void FakeActor(JobManager* m, PolicyEngine* engine, const std::string& actor_id, std::atomic<bool>* stop) {
  std::mt19937_64 rng(std::random_device{}());
  while (!stop->load()) {
    v1::LeaseTasksRequest req;
    req.set_actor_id(actor_id);
    req.set_max_tasks(4);
    auto leases = m->LeaseTasks(req);
    if (!leases.ok() || leases->leases().empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    for (const v1::TaskLease& lease : leases->leases()) {
      // Every leased task names its recipe stage (actors may pick a policy by it).
      if (!lease.task().metadata().count("stage")) {
        std::fprintf(stderr, "lease %s: task without metadata[\"stage\"]\n", lease.lease_id().c_str());
        std::_Exit(7);  // the parent asserts the learner exits 0
      }
      v1::PushTrajectoriesRequest push;
      push.set_lease_id(lease.lease_id());
      *push.mutable_trajectory() = FakeRollout(lease, engine->GetInfo().policy_version, rng);
      (void)m->Push(push);
    }
  }
}

// ---- The learner process ----

// Opens the state dir (submitting the job on the first start), runs the job
// with a fake actor until it finishes, writes the metrics scrape.
// lora > 0: actor and critic train LoRA adapters of that rank.
int LearnerMain(const std::string& root, int full_every, int lora) {
  MetricsRegistry registry;
  LearnerMetrics metrics(&registry);
  // The policy server the job swaps weights into; it starts on the base checkpoint, as after any restart.
  auto engine = PolicyEngine::Load(root + "/base", "cpu", "float32", 0, EngineOptions{});
  if (!engine.ok()) return std::fprintf(stderr, "engine: %s\n", engine.status().ToString().c_str()), 1;
  PolicyEngine* e = engine->get();
  EngineWeightSink sink(e);
  auto m = JobManager::Open(
      root + "/state", [&metrics, &sink] { return MakeRecipeRunner(&sink, &metrics); }, &metrics);
  if (!m.ok()) return std::fprintf(stderr, "open: %s\n", m.status().ToString().c_str()), 1;
  auto list = (*m)->List(10, "");
  if (!list.ok()) return 1;
  std::string id;
  if (list->jobs().empty()) {
    v1::JobSpec spec;
    spec.set_name("recipe_test");
    spec.set_base_checkpoint(root + "/base");
    spec.set_task_set(root + "/tasks.jsonl");
    spec.set_rollouts_per_task(2);
    std::string hyper = kHyperparameters;
    const std::string keep = "checkpoint { keep_last: 1000 }";
    hyper.replace(hyper.find(keep), keep.size(), absl::StrCat("checkpoint { keep_last: 1000 full_every: ", full_every, " }"));
    if (lora > 0) hyper += absl::StrCat(" actor_lora { rank: ", lora, " } critic_lora { rank: ", lora, " }");
    spec.set_hyperparameters_text(hyper);
    auto job = (*m)->Submit(spec);
    if (!job.ok()) return std::fprintf(stderr, "submit: %s\n", job.status().ToString().c_str()), 1;
    id = job->id();
  } else {
    id = list->jobs(0).id();
  }
  std::atomic<bool> stop{false};
  std::thread actor(FakeActor, m->get(), e, absl::StrCat("fake-", ::getpid()), &stop);
  // A scrape after every step this process commits (that it sees: a watcher
  // may skip revisions), named by the step's stage and number.
  int64_t rev = -1, scraped_step = -1;
  v1::Job job;
  while (true) {
    auto changed = (*m)->WaitForChange(id, &rev, absl::Milliseconds(200), &job);
    if (!changed.ok()) break;
    if (scraped_step < 0) scraped_step = job.step();  // Steps up to here are an earlier process's.
    if (job.step() > scraped_step) {
      scraped_step = job.step();
      (void)WriteFileAtomically(absl::StrCat(root, "/scrapes/", job.stage(), "-", job.step(), ".txt"),
                                registry.Expose());
    }
    if (JobManager::Finished(job.state())) break;
  }
  stop = true;
  actor.join();
  if (job.state() != v1::Job::SUCCEEDED) {
    std::fprintf(stderr, "job %s: %s\n", v1::Job::State_Name(job.state()).c_str(), job.message().c_str());
  }
  return job.state() == v1::Job::SUCCEEDED ? 0 : 1;
}

// ---- The test ----

std::string Self() {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  exe[n > 0 ? n : 0] = '\0';
  return exe;
}

pid_t StartLearner(const std::string& root, int full_every, int lora) {
  const std::string self = Self(), role = "--role=learner", dir = "--root=" + root;
  const std::string every = absl::StrCat("--full_every=", full_every), rank = absl::StrCat("--lora=", lora);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl(self.c_str(), self.c_str(), role.c_str(), dir.c_str(), every.c_str(), rank.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// The job as persisted (what a restarted learner reads).
bool ReadJob(const std::string& root, v1::Job* job) {
  DIR* d = ::opendir((root + "/state/jobs").c_str());
  if (d == nullptr) return false;
  std::string id;
  while (dirent* de = ::readdir(d)) {
    if (de->d_name[0] != '.') id = de->d_name;
  }
  ::closedir(d);
  if (id.empty()) return false;
  auto text = ReadFileToString(root + "/state/jobs/" + id + "/job.textproto");
  return text.ok() && google::protobuf::TextFormat::ParseFromString(*text, job);
}

int StageIndex(const std::string& stage) {
  const char* order[] = {"single_turn_ppo", "agent_warmup", "rft", "value_pretrain", "agentic_ppo"};
  for (int i = 0; i < 5; ++i) {
    if (stage == order[i]) return i;
  }
  return -1;
}

void WriteFixtures(const std::string& root) {
  const ModelConfig c = learner::testing::TinyQwen2Config(kVocab);
  auto model = Transformer::Create(c, Head::kLanguageModel, ModelOptions{}, std::random_device{}());
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(::mkdir((root + "/base").c_str(), 0755), 0);
  ASSERT_TRUE((*model)->Save(root + "/base").ok());
  std::string tasks;
  for (int i = 0; i < 6; ++i) absl::StrAppend(&tasks, "{\"id\": \"synthetic/t", i, "\", \"level\": 1}\n");
  ASSERT_TRUE(WriteFileAtomically(root + "/tasks.jsonl", tasks).ok());
  ASSERT_EQ(::mkdir((root + "/scrapes").c_str(), 0755), 0);
}

// The scrape of the latest PPO step the learner processes wrote; empty if none.
std::string LatestPpoScrape(const std::string& root, int64_t* step) {
  DIR* d = ::opendir((root + "/scrapes").c_str());
  if (d == nullptr) return "";
  std::string best;
  *step = -1;
  while (dirent* de = ::readdir(d)) {
    const std::string name = de->d_name;
    const size_t dash = name.rfind('-');
    int64_t n = 0;
    if (dash == std::string::npos || name.size() < 5) continue;
    const std::string stage = name.substr(0, dash);
    if (stage != "single_turn_ppo" && stage != "agentic_ppo") continue;
    if (absl::SimpleAtoi(name.substr(dash + 1, name.size() - dash - 5), &n) && n > *step) *step = n, best = name;
  }
  ::closedir(d);
  return best.empty() ? "" : root + "/scrapes/" + best;
}

std::vector<std::string> CheckpointDirs(const std::string& root) {
  std::vector<std::string> out;
  v1::Job job;
  if (!ReadJob(root, &job)) return out;
  const std::string ckpts = root + "/state/jobs/" + job.id() + "/checkpoints";
  DIR* d = ::opendir(ckpts.c_str());
  if (d == nullptr) return out;
  while (dirent* de = ::readdir(d)) {
    if (std::string(de->d_name).rfind("step-", 0) == 0) out.push_back(ckpts + "/" + de->d_name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

bool SameWeights(const std::string& a, const std::string& b, Head head) {
  auto x = Transformer::Load(a, head, ModelOptions{});
  auto y = Transformer::Load(b, head, ModelOptions{});
  EXPECT_TRUE(x.ok() && y.ok());
  if (!x.ok() || !y.ok()) return false;
  auto px = (*x)->parameters(), py = (*y)->parameters();
  for (size_t i = 0; i < px.size(); ++i) {
    if (!at::equal(px[i], py[i])) return false;
  }
  return true;
}

// The RFT schedule: constant without min_lr_ratio; with it, lr at the first
// update, lr x ratio at the last, falling all the way, and the midpoint halfway.
TEST(RecipeTest, RftLearningRateIsConstantOrACosineOverTheStage) {
  std::mt19937 rng(std::random_device{}());
  v1::RftConfig rft;
  rft.set_lr(1e-4 * (1 + rng() % 100));
  const int64_t total = 3 + static_cast<int64_t>(rng() % 300);
  for (int64_t k : {int64_t{0}, total / 2, total - 1}) EXPECT_DOUBLE_EQ(RftLearningRate(rft, k, total), rft.lr());
  rft.set_min_lr_ratio(0.01 * (1 + rng() % 50));
  EXPECT_DOUBLE_EQ(RftLearningRate(rft, 0, total), rft.lr());
  EXPECT_NEAR(RftLearningRate(rft, total - 1, total), rft.lr() * rft.min_lr_ratio(), 1e-12);
  const double mid = 0.5 * (1 + rft.min_lr_ratio()) * rft.lr();
  if (total % 2 == 1) EXPECT_NEAR(RftLearningRate(rft, (total - 1) / 2, total), mid, 1e-12);
  for (int64_t k = 1; k < total; ++k) EXPECT_LT(RftLearningRate(rft, k, total), RftLearningRate(rft, k - 1, total));
}

// A batch that fills slowly (a busy sandbox) is not a stalled job: with each trajectory the ingest
// takes, the job's message (what `kernelrl learn`'s stall timeout watches) changes and says how far
// the batch is. Here the test is the actor and pushes one rollout at a time.
TEST(RecipeTest, AFillingBatchChangesTheJobWithEachTrajectory) {
  const std::string root = NewTempDir("recipe_wait_");
  WriteFixtures(root);
  if (::testing::Test::HasFatalFailure()) return;
  auto engine = PolicyEngine::Load(root + "/base", "cpu", "float32", 0, EngineOptions{});
  ASSERT_TRUE(engine.ok()) << engine.status();
  EngineWeightSink sink(engine->get());
  auto m = JobManager::Open(root + "/state", [&sink] { return MakeRecipeRunner(&sink, nullptr); });
  ASSERT_TRUE(m.ok()) << m.status();
  v1::JobSpec spec;
  spec.set_base_checkpoint(root + "/base");
  spec.set_task_set(root + "/tasks.jsonl");
  spec.set_rollouts_per_task(2);  // a batch of 4: two groups of two
  spec.set_hyperparameters_text(kHyperparameters);
  auto job = (*m)->Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  std::mt19937_64 rng(std::random_device{}());
  int64_t rev = -1;
  v1::Job seen;
  for (int pushed = 1; pushed <= 3; ++pushed) {  // three of the batch's four: it stays unfilled
    v1::LeaseTasksRequest req;
    req.set_actor_id("test-actor");
    req.set_max_tasks(1);
    absl::StatusOr<v1::LeaseTasksResponse> leases;
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while ((leases = (*m)->LeaseTasks(req)).ok() && leases->leases().empty() && absl::Now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_TRUE(leases.ok() && leases->leases_size() == 1) << "no lease for rollout " << pushed;
    v1::PushTrajectoriesRequest push;
    push.set_lease_id(leases->leases(0).lease_id());
    *push.mutable_trajectory() = FakeRollout(leases->leases(0), 0, rng);
    push.mutable_trajectory()->mutable_final_verdict()->set_outcome(v1::Verdict::OK);  // never an infra error
    push.mutable_trajectory()->set_reward(1 + pushed % 2);
    ASSERT_TRUE((*m)->Push(push).accepted()) << "rollout " << pushed;
    const std::string want = absl::StrCat("so far ", pushed, " trajectories accepted");
    while (seen.message().find(want) == std::string::npos) {
      auto changed = (*m)->WaitForChange(job->id(), &rev, absl::Seconds(30), &seen);
      ASSERT_TRUE(changed.ok() && *changed) << "the job did not change after rollout " << pushed << ": "
                                            << seen.message();
    }
    EXPECT_EQ(seen.step(), 0);
    EXPECT_NE(seen.message().find("single_turn_ppo step 0: waiting for a batch, "), std::string::npos)
        << seen.message();
  }
  EXPECT_NE(seen.message().find("1 of 2 groups ready"), std::string::npos) << seen.message();
  ASSERT_TRUE((*m)->Cancel(job->id(), "test over").ok());
}

// full_every: CheckpointConfig.full_every. Above 1 the kills fall after an
// update that wrote no full checkpoint, so each restart rolls back.
void RunThroughKills(int full_every, int lora = 0) {
  const std::string root = NewTempDir("recipe_test_");
  WriteFixtures(root);
  if (::testing::Test::HasFatalFailure()) return;
  // Kill -9 the learner once the job is at (or past) each of these stages.
  std::vector<std::string> kill_at = {"agent_warmup", "value_pretrain", "agentic_ppo"};
  int incarnations = 0, kills = 0;
  std::vector<int64_t> killed_at;  // The job's step when the test killed the learner.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  bool done = false;
  while (!done && std::chrono::steady_clock::now() < deadline) {
    const pid_t pid = StartLearner(root, full_every, lora);
    ASSERT_GT(pid, 0);
    ++incarnations;
    while (true) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "learner incarnation " << incarnations
                                                                   << " failed, status " << status;
        done = true;
        break;
      }
      v1::Job job;
      // Above full_every 1, only after an update of the stage (a PPO stage names itself from its
      // start, when its step is still the last stage's, which ended on a full checkpoint).
      if (!kill_at.empty() && ReadJob(root, &job) && StageIndex(job.stage()) >= StageIndex(kill_at.front()) &&
          (full_every == 1 || (job.step() % full_every != 0 && job.stage_step() > 0))) {
        std::printf("kill -9 at stage %s step %ld (stage step %ld)\n", job.stage().c_str(),
                    static_cast<long>(job.step()), static_cast<long>(job.stage_step()));
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        ++kills;
        killed_at.push_back(job.step());
        while (!kill_at.empty() && StageIndex(job.stage()) >= StageIndex(kill_at.front())) kill_at.erase(kill_at.begin());
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        FAIL() << "the job did not finish in time";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ASSERT_TRUE(done);
  EXPECT_GE(kills, 1);
  v1::Job job;
  ASSERT_TRUE(ReadJob(root, &job));
  EXPECT_EQ(job.state(), v1::Job::SUCCEEDED) << job.message();
  std::printf("%d incarnations, %d kills; job at step %ld, version %ld\n", incarnations, kills,
              static_cast<long>(job.step()), static_cast<long>(job.policy_version()));

  // Every stage's output: the checkpoints by stage, in order.
  const std::vector<std::string> ckpts = CheckpointDirs(root);
  if (full_every == 1) ASSERT_EQ(static_cast<int64_t>(ckpts.size()), job.step());
  for (const std::string& dir : ckpts) {  // A LoRA job keeps its adapters beside the base, as PEFT does.
    EXPECT_EQ(::access((dir + "/policy/adapter_model.safetensors").c_str(), F_OK) == 0, lora > 0) << dir;
    EXPECT_EQ(::access((dir + "/critic/adapter_config.json").c_str(), F_OK) == 0, lora > 0) << dir;
  }
  std::map<int, std::vector<std::string>> by_stage;
  std::map<int64_t, int> stage_of_step;  // Committed step -> its recipe stage.
  int last_stage = 0;
  for (const std::string& dir : ckpts) {
    auto c = LoadCheckpoint(dir, /*restore_rng=*/false);
    ASSERT_TRUE(c.ok()) << c.status();
    const int stage = static_cast<int>(c->optimizer.at("recipe/stage").item<int64_t>());
    EXPECT_GE(stage, last_stage) << dir;
    last_stage = stage;
    by_stage[stage].push_back(dir);
    stage_of_step[c->step] = stage;
  }
  EXPECT_EQ(by_stage.count(1), 0u);  // Warm-up collects, it does not step.
  if (full_every == 1) {
    EXPECT_EQ(by_stage[0].size(), static_cast<size_t>(kSingleTurnSteps));
    ASSERT_GE(by_stage[2].size(), static_cast<size_t>(kRftEpochs));
    EXPECT_EQ(by_stage[2].size() % kRftEpochs, 0u);
    EXPECT_EQ(by_stage[3].size(), static_cast<size_t>(kValueSteps));
    EXPECT_EQ(by_stage[4].size(), static_cast<size_t>(kAgenticSteps));
  } else {
    // A full checkpoint every full_every updates and at each stage's end (the job's last step included).
    for (int stage : {0, 2, 3, 4}) ASSERT_FALSE(by_stage[stage].empty()) << "stage " << stage;
    EXPECT_EQ(stage_of_step.rbegin()->first, job.step());
    for (const auto& [step, stage] : stage_of_step) {
      auto next = stage_of_step.upper_bound(step);
      const bool stage_end = next == stage_of_step.end() || next->second > stage;
      EXPECT_TRUE(step % full_every == 0 || stage_end) << "a full checkpoint at step " << step;
    }
    // Exports between full checkpoints are removed once a full one covers them.
    EXPECT_TRUE(ListDir(root + "/state/jobs/" + job.id() + "/checkpoints/exports").empty());
  }
  // RFT moves the policy only, value pretraining the critic only.
  EXPECT_FALSE(SameWeights(by_stage[0].back() + "/policy", by_stage[2].front() + "/policy", Head::kLanguageModel));
  EXPECT_TRUE(SameWeights(by_stage[0].back() + "/critic", by_stage[2].back() + "/critic", Head::kValue));
  EXPECT_TRUE(SameWeights(by_stage[2].back() + "/policy", by_stage[3].back() + "/policy", Head::kLanguageModel));
  EXPECT_FALSE(SameWeights(by_stage[2].back() + "/critic", by_stage[3].front() + "/critic", Head::kValue));

  // The ledger: warm-up trajectories collected; every trained trajectory
  // trained exactly once (TRAINED records voided by a later ROLLBACK do not
  // count); infra errors never trained; one UPDATE record per committed step,
  // naming the step's stage, except an update a kill -9 cut between its
  // checkpoint and its UPDATE record: that step is committed without one.
  auto ledger = ReadFileToString(root + "/state/jobs/" + job.id() + "/ledger.jsonl");
  ASSERT_TRUE(ledger.ok());
  std::map<std::string, int64_t> trained;  // id -> step
  std::set<std::string> infra;
  std::map<int64_t, std::vector<v1::LedgerRecord>> updates;  // step -> its UPDATE records
  int warmup_accepted = 0, warmup_dropped = 0, slots_dropped = 0, rollbacks = 0;
  for (absl::string_view line : absl::StrSplit(*ledger, '\n', absl::SkipEmpty())) {
    v1::LedgerRecord r;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(std::string(line), &r).ok()) << line;
    if (r.kind() == v1::LedgerRecord::ACCEPTED && r.stage() == "agent_warmup") ++warmup_accepted;
    // A task whose infra errors exhausted its reruns is dropped: its lease ends the warm-up one short.
    if (r.kind() == v1::LedgerRecord::INFRA_ERROR && r.stage() == "agent_warmup" && r.reason() == "dropped") {
      ++warmup_dropped;
    }
    if (r.kind() == v1::LedgerRecord::INFRA_ERROR) infra.insert(r.trajectory_id());
    // A slot whose reruns ran out leaves its group one member short when that group trains.
    if (r.kind() == v1::LedgerRecord::INFRA_ERROR && r.reason() == "dropped" && r.stage() != "agent_warmup") {
      ++slots_dropped;
    }
    if (r.kind() == v1::LedgerRecord::ROLLBACK) {
      for (auto it = trained.begin(); it != trained.end();) it = it->second > r.step() ? trained.erase(it) : ++it;
      updates.erase(updates.upper_bound(r.step()), updates.end());
      ++rollbacks;
    }
    if (r.kind() == v1::LedgerRecord::TRAINED) {
      EXPECT_EQ(trained.count(r.trajectory_id()), 0u) << r.trajectory_id() << " trained twice";
      trained[r.trajectory_id()] = r.step();
    }
    if (r.kind() == v1::LedgerRecord::UPDATE) updates[r.step()].push_back(r);
  }
  const char* stage_names[] = {"single_turn_ppo", "agent_warmup", "rft", "value_pretrain", "agentic_ppo"};
  for (const auto& [step, records] : updates) {
    EXPECT_TRUE(stage_of_step.count(step) || (full_every > 1 && step <= job.step()))
        << "UPDATE record of step " << step << ", never committed";
  }
  if (full_every > 1) {
    EXPECT_GE(rollbacks, 1) << "no kill fell between full checkpoints";
    for (int64_t step = 1; step <= job.step(); ++step) {
      if (updates[step].empty()) continue;  // Cut by a kill; counted below for the full checkpoints.
      EXPECT_EQ(updates[step].back().policy_version(), step);
      // A stage's last update exports; its full checkpoint (Flush) follows the UPDATE record.
      // Between full checkpoints the engine takes the weights from memory: no export, a weight sync.
      const auto& um = updates[step].back().metrics();
      EXPECT_TRUE(step % full_every == 0 ? um.count("checkpoint_seconds") : um.count("weight_sync_seconds") && !um.count("export_seconds"))
          << "step " << step;
      if (stage_of_step.count(step)) updates[step].erase(updates[step].begin(), updates[step].end() - 1);
    }
  }
  int missing = 0;
  for (const auto& [step, stage] : stage_of_step) {
    if (updates[step].empty()) {
      // The update in flight when the test killed the learner (it may have finished one more first).
      const bool cut =
          std::any_of(killed_at.begin(), killed_at.end(), [&](int64_t k) { return k < step && step <= k + 2; });
      EXPECT_TRUE(cut) << "committed step " << step << " has no UPDATE record and no kill cut it";
      std::printf("step %ld: no UPDATE record (cut by a kill)\n", static_cast<long>(step));
      ++missing;
      continue;
    }
    ASSERT_EQ(updates[step].size(), 1u) << "UPDATE records of step " << step;
    const v1::LedgerRecord& u = updates[step][0];
    EXPECT_EQ(u.stage(), stage_names[stage]) << "step " << step;
    EXPECT_EQ(u.policy_version(), step);
    EXPECT_GE(u.stage_step(), 1);
    EXPECT_TRUE(u.metrics().count(step % full_every == 0 ? "checkpoint_seconds" : "weight_sync_seconds")) << "step " << step;
    EXPECT_EQ(u.metrics().at("policy_version"), step);
    if (u.stage() == "single_turn_ppo" || u.stage() == "agentic_ppo") {
      // The critic's replay step: the batch alone at the stage's first update, then with the
      // batch before it (found again from the ledger after a kill).
      ASSERT_TRUE(u.metrics().count("critic_replay_trajectories")) << "step " << step;
      const double replayed = u.metrics().at("critic_replay_trajectories"), own = u.metrics().at("trajectories");
      if (u.stage_step() == 1) {
        EXPECT_EQ(replayed, own) << "step " << step;
      } else {
        EXPECT_GT(replayed, own) << "step " << step;
        // The replay's value step stays in the PPO stage: the next update keeps its moments.
        EXPECT_EQ(u.metrics().count("optimizer_reset"), 0u) << "step " << step;
      }
    }
  }
  EXPECT_LE(missing, kills);
  EXPECT_GE(warmup_accepted + warmup_dropped, kWarmup) << warmup_dropped << " warm-up task(s) dropped";
  // PPO and value pretraining (fresh rollouts of the RFT policy) train on the buffer's trajectories.
  const int full = (kSingleTurnSteps + kValueSteps + kAgenticSteps) * kPerStep;
  EXPECT_LE(static_cast<int>(trained.size()), full);
  EXPECT_GE(static_cast<int>(trained.size()), full - slots_dropped) << slots_dropped << " rollout slot(s) dropped";
  for (const auto& [id, step] : trained) EXPECT_EQ(infra.count(id), 0u) << id;

  // The scrape after the latest PPO step a learner process saw itself commit.
  int64_t scrape_step = -1;
  const std::string scrape = LatestPpoScrape(root, &scrape_step);
  ASSERT_FALSE(scrape.empty()) << "no scrape after a PPO step";
  std::printf("checking %s\n", scrape.c_str());
  auto text = ReadFileToString(scrape);
  ASSERT_TRUE(text.ok());
  const auto s = ParseScrape(*text);
  auto at = [&](const std::string& k) {
    EXPECT_TRUE(s.count(k)) << "scrape lacks " << k;
    return s.count(k) ? s.at(k) : NAN;
  };
  // The one job: RUNNING, or SUCCEEDED when the scrape followed its last step (seen once in CI).
  EXPECT_EQ(at("kernelrl_learner_jobs{state=\"RUNNING\"}") + at("kernelrl_learner_jobs{state=\"SUCCEEDED\"}"), 1);
  EXPECT_GE(at("kernelrl_learner_ppo_steps_total"), 1);
  EXPECT_EQ(at("kernelrl_learner_policy_version"), scrape_step);  // One version per committed step.
  EXPECT_GT(at("kernelrl_learner_trajectories_total{result=\"accepted\"}"), 0);
  EXPECT_GT(at("kernelrl_learner_trajectory_staleness_versions_count"), 0);
  EXPECT_GE(at("kernelrl_learner_trajectory_staleness_versions_sum"), 0);
  EXPECT_GT(at("kernelrl_learner_reward_count"), 0);
  EXPECT_GT(at("kernelrl_learner_step_seconds_count"), 0);
  const double reward_mean = at("kernelrl_learner_reward_mean");
  EXPECT_TRUE(reward_mean >= -1 && reward_mean <= 3) << reward_mean;
  const double entropy = at("kernelrl_learner_entropy");
  EXPECT_TRUE(entropy > 0 && entropy <= std::log(kVocab) + 1e-6) << entropy;
  const double ev = at("kernelrl_learner_explained_variance");
  EXPECT_TRUE(std::isfinite(ev) && ev <= 1) << ev;
  const double clip = at("kernelrl_learner_clip_fraction");
  EXPECT_TRUE(clip >= 0 && clip <= 1) << clip;
  const double is_min = at("kernelrl_learner_is_ratio{stat=\"min\"}"), is_max = at("kernelrl_learner_is_ratio{stat=\"max\"}");
  const double is_mean = at("kernelrl_learner_is_ratio{stat=\"mean\"}");
  EXPECT_TRUE(is_min > 0 && is_min <= is_mean && is_mean <= is_max) << is_min << " " << is_mean << " " << is_max;
  const double masked = at("kernelrl_learner_mask_fraction");
  EXPECT_TRUE(masked >= 0 && masked <= 1) << masked;
  const double dual = at("kernelrl_learner_dual_clip_fraction");
  EXPECT_TRUE(dual >= 0 && dual <= 1) << dual;
  const double clipped_len = at("kernelrl_learner_response_length_clipped_ratio");
  EXPECT_TRUE(clipped_len >= 0 && clipped_len <= 1) << clipped_len;
  EXPECT_GT(at("kernelrl_learner_tokens_per_second"), 0);
  const double mfu = at("kernelrl_learner_mfu");
  EXPECT_TRUE(mfu > 0 && std::isfinite(mfu)) << mfu;
  EXPECT_NEAR(mfu, at("kernelrl_learner_train_flops_per_second") / 1e11, 1e-9 + 1e-6 * mfu);
  EXPECT_GT(at("kernelrl_learner_loss{loss=\"value\"}"), 0);
  EXPECT_GT(at("kernelrl_learner_grad_norm{model=\"actor\"}"), 0);
  EXPECT_GE(at("kernelrl_learner_buffer_depth"), 0);
  EXPECT_GT(at("kernelrl_learner_tokens_trained_total"), 0);
}

TEST(RecipeTest, AllStagesThroughTheJobApiSurviveKillsBetweenStages) { RunThroughKills(1); }

// Full checkpoints every 2 updates: kills after an update without one roll
// the job back to the last full checkpoint; it ends the same way.
TEST(RecipeTest, FullCheckpointsEveryTwoUpdatesSurviveKillsInBetween) { RunThroughKills(2); }

// A LoRA job (rank 4 on actor and critic) through the same kills: every
// resume reads the adapters beside the frozen base in each checkpoint.
TEST(RecipeTest, LoraJobSurvivesKillsBetweenStages) { RunThroughKills(1, 4); }

}  // namespace
}  // namespace kernelrl::learner::rl

int main(int argc, char** argv) {
  for (int i = 1; i + 3 < argc; ++i) {
    if (std::string(argv[i]) == "--role=learner" && std::string(argv[i + 1]).rfind("--root=", 0) == 0 &&
        std::string(argv[i + 2]).rfind("--full_every=", 0) == 0 && std::string(argv[i + 3]).rfind("--lora=", 0) == 0) {
      return kernelrl::learner::rl::LearnerMain(argv[i + 1] + 7, std::atoi(argv[i + 2] + 13), std::atoi(argv[i + 3] + 7));
    }
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
