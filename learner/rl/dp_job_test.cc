// The data-parallel job protocol on the CPU: rank 0 (a DpLeader, as the
// recipe drives it) and follower ranks (RunDpFollower, in threads) meet
// through a c10d FileStore and reduce through the store backend
// (learner/dist/store_backend_for_test.h). Followers build their trainers
// from the same checkpoint files and read their shards from the job's
// trajectory files; rank 0's PPO, RFT and value steps then equal one rank's
// steps on the whole batch (metrics and weights), per-task baselines
// included: with replicated models, fully sharded ones over 2 and 3 ranks
// (uneven shards) and hybrid-sharded ones (two hosts of two). A sharded job
// saved and resumed takes the same next step as the uninterrupted one.
#include "learner/rl/dp_job.h"

#include <c10/cuda/CUDAFunctions.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/gpu_presence.h"
#include "gtest/gtest.h"
#include "learner/dist/launcher.h"
#include "learner/dist/store_backend_for_test.h"
#include "learner/test_util.h"
#include "learner/rl/ingest.h"
#include "learner/checkpoint.h"
#include "learner/rl/job_config.h"
#include "learner/sync/replica_weight_sync.h"

namespace kernelrl::learner::rl {
namespace {

constexpr int kVocab = 48;

v1::Trajectory RandomTrajectory(int i, std::mt19937_64& rng) {
  v1::Trajectory t;
  t.set_id(absl::StrCat("traj/", i));
  const int len = 5 + static_cast<int>(rng() % 20);
  for (int p = 0; p < len; ++p) {
    const bool model = p > 1 && (p == len - 1 || rng() % 3 != 0);
    t.add_token_ids(static_cast<int32_t>(rng() % kVocab));
    t.add_loss_mask(model);
    t.add_logprobs(model ? -0.05f - static_cast<float>(rng() % 2000) / 1000.0f : 0.0f);
  }
  t.set_reward(static_cast<double>(rng() % 5) - 1.0);
  t.set_task_id(absl::StrCat("task/", i % 3));
  return t;
}

// A resident model's weights, by name order (a sharded model's parameters are its shards).
std::vector<at::Tensor> Weights(const Transformer& m) {
  std::vector<at::Tensor> w;
  for (const at::Tensor& p : m.parameters()) w.push_back(p.detach().to(at::kCPU, at::kFloat).clone());
  return w;
}

struct Fixture {
  std::string root, job_dir, base;
  std::vector<Sample> batch;
  std::string hyper;
  v1::LearnerJobConfig config;
};

// A tiny base model and 7 trajectories in a job directory; KERNELRL_TEST_DP_SEED
// reruns one seed (printed) of a failed run. lora > 0: the job trains
// adapters of that rank on actor and critic.
void MakeFixture(Fixture* f, const std::string& device = "cpu", int lora = 0) {
  char tmpl[] = "/tmp/dp_job_test_XXXXXX";
  f->root = mkdtemp(tmpl);
  f->job_dir = f->root + "/job", f->base = f->root + "/base";
  std::filesystem::create_directories(f->job_dir + "/trajectories");
  std::filesystem::create_directories(f->base);
  ModelConfig c;
  c.model_type = "qwen2";
  c.vocab_size = kVocab, c.hidden_size = 32, c.intermediate_size = 64, c.num_layers = 2;
  c.num_heads = 4, c.num_kv_heads = 2, c.head_dim = 8;
  const char* seed_env = std::getenv("KERNELRL_TEST_DP_SEED");
  const uint64_t seed = seed_env != nullptr ? std::strtoull(seed_env, nullptr, 10) : std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  auto model = Transformer::Create(c, Head::kLanguageModel, ModelOptions{}, seed);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->Save(f->base).ok());
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 7; ++i) {
    v1::Trajectory t = RandomTrajectory(i, rng);
    ASSERT_TRUE(WriteFileAtomically(Ingest::TrajectoryFile(f->job_dir, t.id()), t.SerializeAsString()).ok());
    auto s = SampleFromTrajectory(t, kVocab, 0);
    ASSERT_TRUE(s.ok()) << s.status();
    f->batch.push_back(*s);
  }
  // Per-task baselines (as the recipe sets them on the global batch): the
  // followers must train with rank 0's, not with none.
  SetTaskBaselines(&f->batch);
  double baselines = 0;
  for (const Sample& s : f->batch) baselines += std::abs(s.baseline);
  ASSERT_GT(baselines, 0.0);
  f->hyper = "device { device: \"" + device + R"(" dtype: "float32" }
                  batch { max_tokens_per_row: 32 activation_checkpointing: false }
                  ppo { task_baseline: true }
                  actor_optimizer { lr: 1e-3 eps: 1e-6 } critic_optimizer { lr: 1e-3 eps: 1e-6 })";
  if (lora > 0) f->hyper += absl::StrCat(" actor_lora { rank: ", lora, " } critic_lora { rank: ", lora, " }");
  auto config = ParseJobConfig(f->hyper);
  ASSERT_TRUE(config.ok()) << config.status();
  f->config = *config;
}

constexpr StepKind kSteps[] = {StepKind::kPpo, StepKind::kSft, StepKind::kValue};

struct GroupRun {
  std::vector<StepMetrics> metrics;
  std::vector<at::Tensor> weights;  // Actor then critic, whole.
  std::vector<std::vector<float>> values;  // The critic's values of the batch after the steps.
};

// Rank 0's side of a job on `dp`: setup from `checkpoint_dir` (empty: the
// base model), `steps`, the critic's values; sharded, the weights come back
// through DpLeader::Save into `save_dir`.
absl::StatusOr<GroupRun> Lead(dist::DataParallel* dp, GroupSharding sharding, const Fixture& f,
                              const std::vector<StepKind>& steps, at::Device device,
                              const std::string& checkpoint_dir, const std::string& save_dir) {
  GroupRun run;
  DpLeader leader(dp, sharding);
  std::map<std::string, at::Tensor> optimizer;
  std::string policy_dir = f.base, critic_dir = f.base;
  if (!checkpoint_dir.empty()) {
    auto loaded = LoadCheckpoint(checkpoint_dir, /*restore_rng=*/false);
    if (!loaded.ok()) return loaded.status();
    optimizer = loaded->optimizer, policy_dir = loaded->policy_dir, critic_dir = loaded->critic_dir;
  }
  auto trainer = leader.Setup(f.job_dir, device, policy_dir, critic_dir, checkpoint_dir, f.hyper, optimizer);
  if (!trainer.ok()) return trainer.status();
  for (StepKind k : steps) {
    auto mine = leader.Step(k, f.batch, (*trainer)->actor_optimizer().lr());
    if (!mine.ok()) return mine.status();
    if (mine->size() >= f.batch.size()) return absl::InternalError("rank 0 took the whole batch");
    auto m = RunStep(**trainer, k, *mine, static_cast<int64_t>(f.batch.size()));
    if (!m.ok()) return m.status();
    run.metrics.push_back(*m);
  }
  auto values = leader.CriticValues(f.batch, trainer->get());
  if (!values.ok()) return values.status();
  run.values = *values;
  if (leader.sharded()) {
    auto exported = leader.ExportPolicy(trainer->get());  // Weight sync between full checkpoints.
    if (!exported.ok()) return exported.status();
    auto whole = leader.Save(save_dir, trainer->get());
    if (!whole.ok()) return whole.status();
    run.weights = Weights(*whole->policy);
    const std::vector<at::Tensor> policy = Weights(**exported);
    for (size_t w = 0; w < policy.size(); ++w) {
      if (!at::equal(policy[w], run.weights[w])) return absl::InternalError("the export is not the policy");
    }
    for (const at::Tensor& w : Weights(*whole->critic)) run.weights.push_back(w);
  } else {
    run.weights = Weights((*trainer)->policy());
    for (const at::Tensor& w : Weights(*(*trainer)->critic())) run.weights.push_back(w);
  }
  if (auto s = leader.End(); !s.ok()) return s;
  if (auto s = leader.Exit(); !s.ok()) return s;
  return run;
}

// `world` ranks (rank 0 here, the others in threads) run a job through the
// protocol on the CPU.
absl::StatusOr<GroupRun> RunGroup(const Fixture& f, int world, GroupSharding sharding, const std::vector<StepKind>& steps,
                                  const std::string& store_name, const std::string& checkpoint_dir = "",
                                  const std::string& save_dir = "") {
  const std::string store = "file://" + f.root + "/" + store_name;
  auto make = [](auto s, int rank, int n) { return c10::make_intrusive<dist::StoreBackendForTest>(s, rank, n); };
  std::vector<absl::Status> follower_status(world);
  std::vector<std::thread> followers;
  for (int r = 1; r < world; ++r) {
    followers.emplace_back([&, r] {
      auto dp = dist::DataParallel::Connect({r, world, store, absl::Seconds(120)}, at::kCPU, make);
      follower_status[r] = dp.ok() ? RunDpFollower(dp->get()) : dp.status();
    });
  }
  absl::StatusOr<GroupRun> run = [&]() -> absl::StatusOr<GroupRun> {
    auto dp = dist::DataParallel::Connect({0, world, store, absl::Seconds(120)}, at::kCPU, make);
    if (!dp.ok()) return dp.status();
    return Lead(dp->get(), sharding, f, steps, at::kCPU, checkpoint_dir, save_dir);
  }();
  for (auto& t : followers) t.join();
  if (!run.ok()) return run;
  for (int r = 1; r < world; ++r) {
    if (!follower_status[r].ok()) return absl::InternalError(absl::StrCat("rank ", r, ": ", follower_status[r].ToString()));
  }
  return run;
}

// Metrics as one rank's; each tensor's update within 1% of one rank's. Not
// element by element: where a gradient is near Adam's eps (a token the batch
// barely samples), float sum-order noise between one rank and several moves
// an element by ~1e-5 (seeds 177635929, 4028595625); a rank that trained on
// the wrong rows moves the whole update.
void ExpectLikeOneRank(const GroupRun& got, const GroupRun& expected, const std::vector<at::Tensor>& before,
                       const std::string& what) {
  ASSERT_EQ(got.metrics.size(), expected.metrics.size()) << what;
  for (size_t i = 0; i < got.metrics.size(); ++i) {
    for (const char* key : {"policy_loss", "value_loss", "sft_loss", "reward_mean", "explained_variance",
                            "actor_grad_norm", "critic_grad_norm", "model_tokens"}) {
      if (!expected.metrics[i].count(key)) continue;
      const double x = expected.metrics[i].at(key);
      EXPECT_NEAR(got.metrics[i].at(key), x, 1e-5 + 1e-4 * std::abs(x)) << what << ": " << key << " step " << i;
    }
  }
  ASSERT_EQ(got.weights.size(), before.size()) << what;
  int moved = 0;
  for (size_t w = 0; w < got.weights.size(); ++w) {
    const at::Tensor mine = got.weights[w] - before[w], one = expected.weights[w] - before[w];
    const double diff = (mine - one).norm().item<double>(), norm = one.norm().item<double>();
    EXPECT_LE(diff, 0.01 * norm + 1e-7) << what << ": weight " << w << " update differs by " << diff << " (norm "
                                        << norm << ")";
    moved += norm > 0;
  }
  EXPECT_GT(moved, static_cast<int>(got.weights.size()) / 2) << what;  // The steps trained.
  ASSERT_EQ(got.values.size(), expected.values.size()) << what;
  for (size_t i = 0; i < got.values.size(); ++i) {
    ASSERT_EQ(got.values[i].size(), expected.values[i].size()) << what;
    for (size_t j = 0; j < got.values[i].size(); ++j) {
      EXPECT_NEAR(got.values[i][j], expected.values[i][j], 1e-3) << what << ": value " << i << "/" << j;
    }
  }
}

// One trainer on `device` takes kSteps on the whole batch: the weights
// before, and the metrics, weights and critic values after.
void OneRank(const Fixture& f, at::Device device, std::vector<at::Tensor>* before, GroupRun* expected) {
  auto single = MakeJobTrainer(f.config, f.base, f.base, {}, device);
  ASSERT_TRUE(single.ok()) << single.status();
  *before = Weights((*single)->policy());
  for (const at::Tensor& w : Weights(*(*single)->critic())) before->push_back(w);
  for (StepKind k : kSteps) {
    auto m = RunStep(**single, k, f.batch);
    ASSERT_TRUE(m.ok()) << m.status();
    expected->metrics.push_back(*m);
  }
  expected->weights = Weights((*single)->policy());
  for (const at::Tensor& w : Weights(*(*single)->critic())) expected->weights.push_back(w);
  auto values = (*single)->CriticValues(f.batch);
  ASSERT_TRUE(values.ok()) << values.status();
  expected->values = *values;
}

TEST(DpJobTest, ReplicatedAndShardedGroupsTrainLikeOneRank) {
  Fixture f;
  MakeFixture(&f);
  std::vector<at::Tensor> before;
  GroupRun expected;
  OneRank(f, at::kCPU, &before, &expected);
  if (HasFatalFailure()) return;

  using D = v1::DistributedConfig;
  const struct {
    const char* name;
    int world;
    GroupSharding sharding;
  } groups[] = {{"replicated 2", 2, {D::REPLICATE, 2}},
                {"full shard 2", 2, {D::FULL_SHARD, 2}},
                {"full shard 3", 3, {D::FULL_SHARD, 3}},
                {"hybrid 2x2", 4, {D::HYBRID_SHARD, 2}}};
  int i = 0;
  for (const auto& g : groups) {
    auto run = RunGroup(f, g.world, g.sharding, {std::begin(kSteps), std::end(kSteps)}, absl::StrCat("store", i),
                        "", absl::StrCat(f.root, "/saved", i));
    ++i;
    ASSERT_TRUE(run.ok()) << g.name << ": " << run.status();
    ExpectLikeOneRank(*run, expected, before, g.name);
  }
}

// PPO, a checkpoint as the recipe writes it, a fresh group resumes from it
// for the SFT step: the same as without the interruption.
void ExpectShardedSaveResume(Fixture& f) {
  const GroupSharding sharding{v1::DistributedConfig::FULL_SHARD, 2};
  // Uninterrupted: PPO, then SFT.
  auto whole = RunGroup(f, 2, sharding, {StepKind::kPpo, StepKind::kSft}, "store_a", "", f.root + "/saved_a");
  ASSERT_TRUE(whole.ok()) << whole.status();
  // Interrupted: PPO, a checkpoint as the recipe writes it (shards + the
  // consolidated export), then a fresh group resumes from it for the SFT step.
  const std::string root = f.root + "/checkpoints";
  absl::Status saved = [&]() -> absl::Status {
    const std::string store = "file://" + f.root + "/store_b";
    auto make = [](auto s, int rank, int n) { return c10::make_intrusive<dist::StoreBackendForTest>(s, rank, n); };
    absl::Status follower_status;
    std::thread follower([&] {
      auto dp = dist::DataParallel::Connect({1, 2, store, absl::Seconds(120)}, at::kCPU, make);
      follower_status = dp.ok() ? RunDpFollower(dp->get()) : dp.status();
    });
    absl::Status s = [&]() -> absl::Status {
      auto dp = dist::DataParallel::Connect({0, 2, store, absl::Seconds(120)}, at::kCPU, make);
      if (!dp.ok()) return dp.status();
      DpLeader leader(dp->get(), sharding);
      auto trainer = leader.Setup(f.job_dir, at::kCPU, f.base, f.base, "", f.hyper, {});
      if (!trainer.ok()) return trainer.status();
      auto mine = leader.Step(StepKind::kPpo, f.batch, (*trainer)->actor_optimizer().lr());
      if (!mine.ok()) return mine.status();
      if (auto m = (*trainer)->PpoStep(*mine, static_cast<int64_t>(f.batch.size())); !m.ok()) return m.status();
      CheckpointToSave ck;
      ck.step = 1;
      ck.shards_dir = root + "/.shards-step-00000001";
      if (auto st = MakeDir(root, 0755); !st.ok()) return st;
      auto c = leader.Save(ck.shards_dir, trainer->get());
      if (!c.ok()) return c.status();
      ck.policy = c->policy.get();
      ck.critic = c->critic.get();
      ck.optimizer = (*trainer)->State();
      if (auto dir = SaveCheckpoint(root, ck); !dir.ok()) return dir.status();
      if (auto st = leader.End(); !st.ok()) return st;
      return leader.Exit();
    }();
    follower.join();
    return s.ok() ? follower_status : s;
  }();
  ASSERT_TRUE(saved.ok()) << saved;
  auto latest = LoadLatestCheckpoint(root, false);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_TRUE(std::filesystem::exists(latest->dir + "/shards")) << "shards are part of the checkpoint";
  EXPECT_FALSE(std::filesystem::exists(root + "/.shards-step-00000001"));
  auto resumed = RunGroup(f, 2, sharding, {StepKind::kSft}, "store_c", latest->dir, f.root + "/saved_c");
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  ASSERT_EQ(whole->weights.size(), resumed->weights.size());
  for (size_t w = 0; w < whole->weights.size(); ++w) {
    EXPECT_TRUE(at::equal(whole->weights[w], resumed->weights[w]))
        << "weight " << w << ": " << (whole->weights[w] - resumed->weights[w]).abs().max().item<double>();
  }
  for (const char* key : {"sft_loss", "actor_grad_norm"}) {
    EXPECT_EQ(whole->metrics[1].at(key), resumed->metrics[0].at(key)) << key;
  }
  // A replicated group refuses the sharded checkpoint, naming why.
  auto replicated = RunGroup(f, 2, {v1::DistributedConfig::REPLICATE, 2}, {StepKind::kSft}, "store_d", latest->dir);
  ASSERT_FALSE(replicated.ok());
  EXPECT_NE(replicated.status().message().find("written by a sharded job"), std::string::npos) << replicated.status();
}

TEST(DpJobTest, ShardedSaveThenResumeTakesTheSameNextStep) {
  Fixture f;
  MakeFixture(&f);
  ExpectShardedSaveResume(f);
}

// The KL penalty's reference is a whole copy of the actor: a sharded group refuses the job when it
// starts, naming the field, not at its first PPO update.
TEST(DpJobTest, AShardedGroupRefusesAKlReferenceAtTheStart) {
  Fixture f;
  MakeFixture(&f);
  f.hyper += "\nppo { kl_ref_coef: 0.1 }\n";
  // An SFT step alone: only the start can refuse it.
  auto run = RunGroup(f, 2, {v1::DistributedConfig::FULL_SHARD, 2}, {StepKind::kSft}, "store_kl");
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("kl_ref_coef"), std::string::npos) << run.status();
}

// LoRA jobs: sharded and replicated groups train the adapters as one rank
// does; the checkpoint keeps them beside the frozen base and resumes exactly.
TEST(DpJobTest, LoraJobsTrainLikeOneRankAndResume) {
  Fixture f;
  MakeFixture(&f, "cpu", /*lora=*/4);
  std::vector<at::Tensor> before;
  GroupRun expected;
  OneRank(f, at::kCPU, &before, &expected);
  if (HasFatalFailure()) return;
  const int64_t layers = 2;
  ASSERT_EQ(before.size(), static_cast<size_t>(2 * 8 * layers + 2)) << "actor and critic adapters + the value head";
  using D = v1::DistributedConfig;
  int i = 0;
  for (const GroupSharding& g : {GroupSharding{D::FULL_SHARD, 3}, GroupSharding{D::REPLICATE, 2}}) {
    const int world = g.mode == D::FULL_SHARD ? 3 : 2;
    auto run = RunGroup(f, world, g, {std::begin(kSteps), std::end(kSteps)}, absl::StrCat("lora_store", i), "",
                        absl::StrCat(f.root, "/lora_saved", i));
    ++i;
    ASSERT_TRUE(run.ok()) << run.status();
    ExpectLikeOneRank(*run, expected, before, absl::StrCat("lora, ", world, " ranks"));
  }
  ExpectShardedSaveResume(f);
  auto latest = LoadLatestCheckpoint(f.root + "/checkpoints", false);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_TRUE(std::filesystem::exists(latest->policy_dir + "/adapter_model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(latest->critic_dir + "/adapter_config.json"));
}

// A job that cannot fit is refused before its weights are read: the
// checkpoint directory holds only a config.json (a Qwen2.5-7B shape, ~240 GB
// of fp32 weights, masters, gradients and moments for actor + critic), so
// anything but the plan's refusal would fail on the missing weights instead.
// A fully sharded job publishes its policy to a replica in another process
// (a thread here) straight from the shards: rank 1 joins the gathers
// (send_weights), rank 0 announces and broadcasts, the replica acknowledges.
// What it then serves equals the consolidated policy (the export), after a
// step, so stale shards would show.
TEST(DpJobTest, AShardedPolicyReachesAReplicaFromItsShards) {
  Fixture f;
  MakeFixture(&f, "cpu", /*lora=*/2);
  const std::string store = "file://" + f.root + "/store_sync_job", sync_store = "file://" + f.root + "/sync";
  auto make = [](auto s, int rank, int n) { return c10::make_intrusive<dist::StoreBackendForTest>(s, rank, n); };
  absl::Status follower_status, replica_status;
  std::vector<at::Tensor> served;
  int64_t served_version = -1;
  std::thread follower([&] {
    auto dp = dist::DataParallel::Connect({1, 2, store, absl::Seconds(120)}, at::kCPU, make);
    follower_status = dp.ok() ? RunDpFollower(dp->get()) : dp.status();
  });
  std::thread replica([&] {
    replica_status = [&]() -> absl::Status {
      auto sync = dist::DataParallel::Connect({1, 2, sync_store, absl::Seconds(120)}, at::kCPU, make);
      if (!sync.ok()) return sync.status();
      ReplicaWeightReceiver r(sync->get(), ModelOptions{}, [&](std::unique_ptr<Transformer> m, int64_t v) {
        served = Weights(*m);
        served_version = v;
      });
      std::atomic<bool> stop{false};
      return r.Run(stop, absl::Milliseconds(200));
    }();
  });
  absl::Status lead = [&]() -> absl::Status {
    auto dp = dist::DataParallel::Connect({0, 2, store, absl::Seconds(120)}, at::kCPU, make);
    if (!dp.ok()) return dp.status();
    auto sync = dist::DataParallel::Connect({0, 2, sync_store, absl::Seconds(120)}, at::kCPU, make);
    if (!sync.ok()) return sync.status();
    CollectiveWeightSink sink(std::move(*sync), {});
    DpLeader leader(dp->get(), {v1::DistributedConfig::FULL_SHARD, 2});
    auto trainer = leader.Setup(f.job_dir, at::kCPU, f.base, f.base, "", f.hyper, {});
    if (!trainer.ok()) return trainer.status();
    auto mine = leader.Step(StepKind::kPpo, f.batch, (*trainer)->actor_optimizer().lr());
    if (!mine.ok()) return mine.status();
    if (auto m = RunStep(**trainer, StepKind::kPpo, *mine, static_cast<int64_t>(f.batch.size())); !m.ok()) {
      return m.status();
    }
    if (auto s = leader.PublishShards(trainer->get(), &sink, 7); !s.ok()) return s;
    auto exported = leader.ExportPolicy(trainer->get());
    if (!exported.ok()) return exported.status();
    auto merged = (*exported)->MergedCopy(ModelOptions{});  // A replica serves the adapters folded in.
    if (!merged.ok()) return merged.status();
    EXPECT_EQ(served_version, 7);
    const std::vector<at::Tensor> want = Weights(**merged);
    EXPECT_EQ(served.size(), want.size());
    for (size_t w = 0; w < std::min(served.size(), want.size()); ++w) {
      EXPECT_TRUE(at::allclose(served[w], want[w], 1e-6, 1e-6)) << "weight " << w;
    }
    if (auto s = leader.End(); !s.ok()) return s;
    return leader.Exit();
  }();  // The sink goes: the replica's receiver returns.
  follower.join();
  replica.join();
  ASSERT_TRUE(lead.ok()) << lead;
  EXPECT_TRUE(follower_status.ok()) << follower_status;
  EXPECT_TRUE(replica_status.ok()) << replica_status;
}

TEST(DpJobTest, AJobThatCannotFitIsRefusedBeforeLoading) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/qwen7b_config_only";
  ::mkdir(dir.c_str(), 0755);
  ASSERT_TRUE(WriteFileAtomically(dir + "/config.json",
                                  R"({"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584,
                                      "intermediate_size": 18944, "num_hidden_layers": 28,
                                      "num_attention_heads": 28, "num_key_value_heads": 4})")
                  .ok());
  auto config = ParseJobConfig(R"pb(device { device: "cpu" dtype: "float32" } batch { max_tokens_per_row: 4096 })pb");
  ASSERT_TRUE(config.ok()) << config.status();
  auto trainer = MakeJobTrainer(*config, dir, dir, {}, at::kCPU);
  ASSERT_FALSE(trainer.ok());
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kResourceExhausted) << trainer.status();
  EXPECT_NE(trainer.status().message().find("GiB per GPU"), std::string::npos) << trainer.status();
}

// ---- GPU: a fully sharded job over ProcessGroupNCCL ----

TEST(DpJobGpuTest, FullShardJobOverNcclTrainsLikeOneGpu) {
  if (!GpuDevicePresent()) GTEST_SKIP() << "no GPU on this machine (no /dev/nvidiaN): the NCCL job test runs on a GPU machine";
  ASSERT_TRUE(at::hasCUDA()) << "a GPU is present but LibTorch's CUDA backend did not load";
  const int world = learner::testing::DpTestGpus();
  ASSERT_GE(c10::cuda::device_count(), world) << "asked for " << world << " GPUs (KERNELRL_TEST_DP_GPUS)";
  Fixture f;
  MakeFixture(&f, "cuda");
  const at::Device gpu0(at::kCUDA, 0);
  std::vector<at::Tensor> before;
  GroupRun expected;
  OneRank(f, gpu0, &before, &expected);
  if (HasFatalFailure()) return;

  auto address = dist::DataParallel::HostTcpStore("127.0.0.1", 0, absl::Seconds(300));
  ASSERT_TRUE(address.ok()) << address.status();
  auto pids = dist::SpawnRanks({"--role=dp_follower"}, world, *address);
  ASSERT_TRUE(pids.ok()) << pids.status();
  auto dp = dist::DataParallel::ConnectNccl({0, world, *address, absl::Seconds(300)}, 0);
  ASSERT_TRUE(dp.ok()) << dp.status();
  auto run = Lead(dp->get(), {v1::DistributedConfig::FULL_SHARD, world}, f, {std::begin(kSteps), std::end(kSteps)},
                  gpu0, "", f.root + "/saved");
  // Before waiting for the follower: its exit destroys its NCCL communicator,
  // which returns only once rank 0's is destroyed too (the store stays up).
  (*dp)->Shutdown();
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(dist::WaitRanks(*pids).ok());
  ExpectLikeOneRank(*run, expected, before, "nccl full shard");
}

}  // namespace
}  // namespace kernelrl::learner::rl

// A spawned rank (--role=dp_follower) follows rank 0 over NCCL on its GPU.
int main(int argc, char** argv) {
  namespace dist = kernelrl::learner::dist;
  auto flags = dist::TakeRankFlags(&argc, argv);
  if (!flags.ok()) return std::fprintf(stderr, "%s\n", flags.status().ToString().c_str()), 2;
  if (flags->rank > 0) {
    auto dp = dist::DataParallel::ConnectNccl({flags->rank, flags->world_size, flags->rendezvous, absl::Seconds(300)},
                                              flags->rank);
    absl::Status s = dp.ok() ? kernelrl::learner::rl::RunDpFollower(dp->get()) : dp.status();
    if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", flags->rank, s.ToString().c_str());
    return s.ok() ? 0 : 1;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
