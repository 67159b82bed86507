// Fully sharded data parallelism on the CPU: ranks are threads that meet
// through a c10d FileStore and reduce with the store backend
// (store_backend_for_test.h). The reference is one unsharded Trainer on the
// whole batch; the sharded ranks each take their shard of it.
#include "learner/dist/fsdp.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/testing/testing.h"
#include "gtest/gtest.h"
#include "learner/dist/data_parallel.h"
#include "learner/dist/sharded_checkpoint.h"
#include "learner/dist/shard.h"
#include "learner/dist/store_backend_for_test.h"
#include "learner/rl/test_batch.h"
#include "learner/rl/trainer.h"
#include "learner/test_util.h"

namespace kernelrl::learner::dist {
namespace {

using rl::Sample;
using rl::testing::RandomBatch;
using rl::testing::ShardOf;
using rl::StepMetrics;
using rl::Trainer;
using rl::TrainerOptions;

// lora: adapters of that rank (0: none), drawn from a fixed seed so that
// models of other base seeds share them.
std::unique_ptr<Transformer> Tiny(Head head, uint64_t seed, bool checkpointing, int64_t lora = 0) {
  ModelOptions o;
  o.trainable = true;
  o.activation_checkpointing = checkpointing;
  o.lora_rank = lora;
  o.lora_seed = 11;
  auto m = Transformer::Create(learner::testing::TinyQwen2Config(32), head, o, seed);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

struct Variant {
  int world;
  bool checkpointing;  // Also: normalised advantages, an entropy bonus and (sharded) host moments.
  int64_t lora = 0;    // Adapters' rank: the base weights frozen in a compute-dtype part.
};

TrainerOptions Options(const Variant& v) {
  TrainerOptions opt;
  opt.max_tokens_per_row = 24;  // Several rows per rank: gradients accumulate over passes.
  for (rl::AdamWParams* p : {&opt.actor, &opt.critic}) {
    p->lr = 1e-3;
    p->max_grad_norm = 0.01;  // Below the norms here: the clipping path runs.
    // Adam's first update is lr * g / (|g| + eps): with the default 1e-8 a
    // gradient element within rounding of 0 moves by up to 2 lr depending
    // on the order its sum was taken in (shards reduce in a different order
    // from one rank's accumulation). A larger eps keeps the update a smooth
    // function of the gradient, so equal gradients give equal weights.
    p->eps = 1e-4;
    // The schedule and the value head's own rate must match the resident optimizer's.
    p->warmup_steps = 2;
    p->decay_steps = 6;
    p->head_lr_scale = 4.0;
  }
  // The batch's rollout log-probs are random: clipping or masking against
  // them would zero most gradients, and the value head's first-batch
  // initialisation would differ per rank's batch. Compared here: the sharded
  // arithmetic against the resident one.
  opt.value_head_init = false;
  opt.policy_loss.mismatch_mask = rl::MismatchMask::kOff;
  opt.policy_loss.clip_low = opt.policy_loss.clip_high = 1e9;
  opt.policy_loss.dual_clip = 0;
  opt.normalize_advantages = v.checkpointing;
  opt.entropy_coef = v.checkpointing ? 0.01 : 0.0;
  return opt;
}

std::vector<at::Tensor> Weights(const Transformer& m) {
  std::vector<at::Tensor> w;
  for (const at::Tensor& p : m.parameters()) w.push_back(p.detach().to(at::kFloat).clone());
  return w;
}

std::string TempPath(const std::string& name) {
  return ::kernelrl::testing::NewTempDir("fsdp_test_") + "/" + name;
}

struct StepResult {
  StepMetrics metrics;
  std::vector<at::Tensor> actor, critic;  // Weights after the step.
};

void ExpectSameWeights(const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected,
                       const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(actual[i].sizes(), expected[i].sizes()) << what << ": weight " << i;
    EXPECT_TRUE(at::allclose(actual[i], expected[i], 1e-5, 1e-6))
        << what << ": weight " << i << " max diff " << (actual[i] - expected[i]).abs().max().item<double>();
  }
}

TEST(FsdpTest, ShardedStepsEqualUnshardedSteps) {
  // KERNELRL_TEST_FSDP_SEED reruns one seed (printed below) of a failed run.
  const char* seed_env = std::getenv("KERNELRL_TEST_FSDP_SEED");
  const uint64_t seed = seed_env != nullptr ? std::strtoull(seed_env, nullptr, 10) : std::random_device{}();
  std::printf("batch seed %llu\n", static_cast<unsigned long long>(seed));
  for (const Variant& v : {Variant{2, false}, Variant{3, false}, Variant{2, true}, Variant{3, true},
                           Variant{2, false, 4}, Variant{3, true, 4}}) {
    const std::string what = absl::StrCat(v.world, " ranks, checkpointing ", v.checkpointing, ", lora ", v.lora);
    // Step 2 has fewer trajectories than ranks: a rank with no rows runs empty passes.
    const std::vector<std::vector<Sample>> batches = {RandomBatch(7, seed + v.world), RandomBatch(v.world - 1, seed + 9)};

    std::vector<StepResult> expected;
    std::vector<at::Tensor> initial_actor;
    {
      Trainer t(Tiny(Head::kLanguageModel, 5, false, v.lora), Tiny(Head::kValue, 6, false, v.lora), Options(v));
      initial_actor = Weights(t.policy());
      for (const auto& b : batches) {
        auto m = t.PpoStep(b);
        ASSERT_TRUE(m.ok()) << m.status();
        expected.push_back({*m, Weights(t.policy()), Weights(*t.critic())});
      }
      ASSERT_GT(expected[0].metrics.at("actor_grad_norm"), 0.01) << "clipping did not run";
    }

    std::vector<std::vector<StepResult>> got(v.world);
    std::vector<absl::Status> status(v.world);
    std::vector<std::vector<int64_t>> shard_numel(v.world), unit_numel(v.world);
    const std::string store = "file://" + TempPath("store");
    std::vector<std::thread> ranks;
    for (int r = 0; r < v.world; ++r) {
      ranks.emplace_back([&, r] {
        auto fail = [&](const absl::Status& s) { status[r] = s; };
        auto dp = DataParallel::Connect({r, v.world, store, absl::Seconds(120)}, at::kCPU, [](auto s, int rank, int n) {
          return c10::make_intrusive<StoreBackendForTest>(s, rank, n);
        });
        if (!dp.ok()) return fail(dp.status());
        std::unique_ptr<Transformer> models[2] = {Tiny(Head::kLanguageModel, 5, v.checkpointing, v.lora),
                                                  Tiny(Head::kValue, 6, v.checkpointing, v.lora)};
        ShardedWeights* sharded[2];
        for (int k = 0; k < 2; ++k) {
          auto sw = ShardedWeights::Shard(*models[k], (*dp)->backend(), at::kCPU, at::kFloat);
          if (!sw.ok()) return fail(sw.status());
          sharded[k] = *sw;
          for (int64_t u = 0; u < (*sw)->unit_count(); ++u) {
            shard_numel[r].push_back((*sw)->parameters()[u].numel());
            unit_numel[r].push_back((*sw)->unit_numel(u));
          }
          if (models[k]->layers()[0].qkv_w.defined()) return fail(absl::InternalError("resident weights kept"));
        }
        TrainerOptions opt = Options(v);
        UseShardedModels(&opt);
        opt.actor.offload_moments = opt.critic.offload_moments = v.checkpointing;  // Stepped one unit at a time.
        Trainer t(std::move(models[0]), std::move(models[1]), opt);
        t.set_collectives(dp->get());
        if (auto s = t.BroadcastParameters(); !s.ok()) return fail(s);  // A no-op for sharded models.
        for (const auto& b : batches) {
          auto m = t.PpoStep(ShardOf(b, r, v.world), static_cast<int64_t>(b.size()));
          if (!m.ok()) return fail(m.status());
          auto actor = sharded[0]->Consolidate();
          auto critic = sharded[1]->Consolidate();
          if (!actor.ok()) return fail(actor.status());
          if (!critic.ok()) return fail(critic.status());
          got[r].push_back({*m, Weights(**actor), Weights(**critic)});
          if (v.lora == 0) continue;
          // The frozen base came back unchanged, bit for bit.
          const auto now = (*actor)->HFTensors(), initial = Tiny(Head::kLanguageModel, 5, false, v.lora)->HFTensors();
          for (size_t i = 0; i < initial.size(); ++i) {
            if (!at::equal(now[i].second, initial[i].second)) {
              return fail(absl::InternalError(absl::StrCat("frozen ", initial[i].first, " moved")));
            }
          }
        }
      });
    }
    for (auto& th : ranks) th.join();

    // The units cover the models once; each rank holds ceil(N / W) elements
    // of each, nothing more; some unit does not divide evenly (padding runs).
    Trainer whole(Tiny(Head::kLanguageModel, 5, false, v.lora), Tiny(Head::kValue, 6, false, v.lora), Options(v));
    int64_t full = 0, covered = 0;
    bool uneven = false;
    for (const auto& p : whole.policy().parameters()) full += p.numel();
    for (const auto& p : whole.critic()->parameters()) full += p.numel();
    for (int64_t n : unit_numel[0]) covered += n, uneven |= n % v.world != 0;
    EXPECT_EQ(covered, full) << what;
    EXPECT_TRUE(uneven) << what << ": every unit divides evenly; the test means to cover padding";
    for (int r = 0; r < v.world; ++r) {
      ASSERT_EQ(shard_numel[r].size(), unit_numel[0].size()) << what;
      for (size_t u = 0; u < shard_numel[r].size(); ++u) {
        EXPECT_EQ(shard_numel[r][u], (unit_numel[0][u] + v.world - 1) / v.world) << what << ", unit " << u;
      }
    }

    for (int r = 0; r < v.world; ++r) {
      ASSERT_TRUE(status[r].ok()) << what << ": rank " << r << ": " << status[r];
      ASSERT_EQ(got[r].size(), batches.size());
      for (size_t s = 0; s < batches.size(); ++s) {
        const std::string at_step = absl::StrCat(what, ", rank ", r, ", step ", s + 1);
        for (const auto& [k, x] : expected[s].metrics) {
          if (k == "step_seconds" || k == "tokens_per_second" || k == "rows") continue;
          ASSERT_TRUE(got[r][s].metrics.count(k)) << at_step << ": lacks metric " << k;
          EXPECT_NEAR(got[r][s].metrics.at(k), x, 1e-5 + 1e-4 * std::abs(x)) << at_step << ": metric " << k;
        }
        ExpectSameWeights(got[r][s].actor, expected[s].actor, at_step + ", actor");
        ExpectSameWeights(got[r][s].critic, expected[s].critic, at_step + ", critic");
      }
    }
    // The steps moved the weights (the comparison above is not of two initial states).
    double moved = 0;
    for (size_t i = 0; i < initial_actor.size(); ++i) {
      moved = std::max(moved, (expected[0].actor[i] - initial_actor[i]).abs().max().item<double>());
    }
    EXPECT_GT(moved, 1e-4) << what;  // lr 1e-3: Adam moves some weight by about lr.
  }
}

// Runs fn(rank, collectives) on `world` threads that meet through a fresh
// FileStore; returns each rank's status.
std::vector<absl::Status> RunRanks(int world, const std::function<absl::Status(int, DataParallel&)>& fn) {
  std::vector<absl::Status> status(world);
  const std::string store = "file://" + TempPath("store");
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      auto dp = DataParallel::Connect({r, world, store, absl::Seconds(120)}, at::kCPU, [](auto s, int rank, int n) {
        return c10::make_intrusive<StoreBackendForTest>(s, rank, n);
      });
      status[r] = dp.ok() ? fn(r, **dp) : dp.status();
    });
  }
  for (auto& th : ranks) th.join();
  return status;
}

// A sharded actor + critic trainer on the collectives; weights from the seeds.
struct ShardedTrainer {
  std::unique_ptr<Trainer> trainer;
  ShardedWeights* actor = nullptr;
  ShardedWeights* critic = nullptr;
  std::vector<ShardedModelRef> refs() {
    return {{"actor", actor, &trainer->actor_optimizer()}, {"critic", critic, trainer->critic_optimizer()}};
  }
};
absl::StatusOr<ShardedTrainer> MakeSharded(DataParallel& dp, const Variant& v, uint64_t actor_seed,
                                           uint64_t critic_seed) {
  auto a = Tiny(Head::kLanguageModel, actor_seed, v.checkpointing, v.lora);
  auto c = Tiny(Head::kValue, critic_seed, v.checkpointing, v.lora);
  auto sa = ShardedWeights::Shard(*a, dp.backend(), at::kCPU, at::kFloat);
  if (!sa.ok()) return sa.status();
  auto sc = ShardedWeights::Shard(*c, dp.backend(), at::kCPU, at::kFloat);
  if (!sc.ok()) return sc.status();
  TrainerOptions opt = Options(v);
  UseShardedModels(&opt);
  ShardedTrainer t;
  t.trainer = std::make_unique<Trainer>(std::move(a), std::move(c), opt);
  t.trainer->set_collectives(&dp);
  t.actor = *sa, t.critic = *sc;
  return t;
}

// Save, resume into models of other initial weights, step: the same step as
// without the interruption; consolidated without a process group.
void ExpectShardedSaveResume(const Variant& v) {
  const uint64_t seed = std::random_device{}();
  std::printf("batch seed %llu, lora %lld\n", static_cast<unsigned long long>(seed), static_cast<long long>(v.lora));
  const std::vector<Sample> first = RandomBatch(7, seed), next = RandomBatch(5, seed + 1);
  const std::string dir = TempPath("ckpt");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);

  // Uninterrupted: step, save, step again.
  std::vector<StepResult> saved(v.world), resumed(v.world), uninterrupted(v.world);
  auto status = RunRanks(v.world, [&](int r, DataParallel& dp) -> absl::Status {
    auto t = MakeSharded(dp, v, 5, 6);
    if (!t.ok()) return t.status();
    auto m = t->trainer->PpoStep(ShardOf(first, r, v.world), static_cast<int64_t>(first.size()));
    if (!m.ok()) return m.status();
    if (auto s = SaveShards(dir, t->refs()); !s.ok()) return s;
    auto a = t->actor->Consolidate();
    if (!a.ok()) return a.status();
    saved[r].actor = Weights(**a);
    if (auto s = dp.Barrier(); !s.ok()) return s;  // Every rank's file is written.
    m = t->trainer->PpoStep(ShardOf(next, r, v.world), static_cast<int64_t>(next.size()));
    if (!m.ok()) return m.status();
    a = t->actor->Consolidate();
    auto c = t->critic->Consolidate();
    if (!a.ok() || !c.ok()) return absl::InternalError("consolidate");
    uninterrupted[r] = {*m, Weights(**a), Weights(**c)};
    return absl::OkStatus();
  });
  for (int r = 0; r < v.world; ++r) ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];

  // Resumed: other initial weights, then the checkpoint, then the same step.
  status = RunRanks(v.world, [&](int r, DataParallel& dp) -> absl::Status {
    auto t = MakeSharded(dp, v, 50, 60);
    if (!t.ok()) return t.status();
    if (auto s = LoadShards(dir, t->refs()); !s.ok()) return s;
    auto m = t->trainer->PpoStep(ShardOf(next, r, v.world), static_cast<int64_t>(next.size()));
    if (!m.ok()) return m.status();
    auto a = t->actor->Consolidate();
    auto c = t->critic->Consolidate();
    if (!a.ok() || !c.ok()) return absl::InternalError("consolidate");
    resumed[r] = {*m, Weights(**a), Weights(**c)};
    return absl::OkStatus();
  });
  for (int r = 0; r < v.world; ++r) ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
  for (int r = 0; r < v.world; ++r) {
    for (const auto& [k, x] : uninterrupted[r].metrics) {
      if (k == "step_seconds" || k == "tokens_per_second") continue;
      EXPECT_EQ(resumed[r].metrics.at(k), x) << "rank " << r << ": metric " << k;
    }
    for (size_t i = 0; i < uninterrupted[r].actor.size(); ++i) {
      EXPECT_TRUE(at::equal(resumed[r].actor[i], uninterrupted[r].actor[i])) << "rank " << r << ": actor " << i;
    }
    for (size_t i = 0; i < uninterrupted[r].critic.size(); ++i) {
      EXPECT_TRUE(at::equal(resumed[r].critic[i], uninterrupted[r].critic[i])) << "rank " << r << ": critic " << i;
    }
  }

  // Consolidated without a process group: the saved weights, and a Hugging
  // Face checkpoint that loads back equal.
  auto actor = ConsolidateShards(dir, "actor");
  ASSERT_TRUE(actor.ok()) << actor.status();
  ExpectSameWeights(Weights(**actor), saved[0].actor, "consolidated actor");
  for (size_t i = 0; i < saved[0].actor.size(); ++i) EXPECT_TRUE(at::equal(Weights(**actor)[i], saved[0].actor[i]));
  const std::string hf = dir + "/hf_actor";
  ASSERT_EQ(::mkdir(hf.c_str(), 0755), 0);
  ASSERT_TRUE((*actor)->Save(hf).ok());
  ModelOptions with_adapters;
  with_adapters.lora_rank = v.lora;
  auto loaded = Transformer::Load(hf, Head::kLanguageModel, with_adapters);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  for (size_t i = 0; i < saved[0].actor.size(); ++i) EXPECT_TRUE(at::equal(Weights(**loaded)[i], saved[0].actor[i]));
  auto critic = ConsolidateShards(dir, "critic");
  ASSERT_TRUE(critic.ok()) << critic.status();
  EXPECT_EQ((*critic)->head(), Head::kValue);

  // Another world size cannot resume it.
  status = RunRanks(2, [&](int, DataParallel& dp) -> absl::Status {
    auto t = MakeSharded(dp, v, 5, 6);
    if (!t.ok()) return t.status();
    return LoadShards(dir, t->refs());
  });
  EXPECT_EQ(status[0].code(), absl::StatusCode::kFailedPrecondition) << status[0];
}

TEST(FsdpTest, ShardedSaveResumeGivesTheSameNextStepAndConsolidates) { ExpectShardedSaveResume({3, true}); }

TEST(FsdpTest, ShardedLoraSaveResumeRestoresTheFrozenBaseToo) { ExpectShardedSaveResume({3, true, 4}); }

TEST(FsdpTest, HybridShardingTwoHostsOfTwoEqualsUnshardedSteps) {
  // Ranks 0,1 are host 0 and ranks 2,3 host 1: shards within a host, replicas across.
  const uint64_t seed = std::random_device{}();
  std::printf("batch seed %llu\n", static_cast<unsigned long long>(seed));
  const Variant v{4, true};
  const std::vector<std::vector<Sample>> batches = {RandomBatch(9, seed), RandomBatch(6, seed + 1)};
  std::vector<StepResult> expected;
  {
    Trainer t(Tiny(Head::kLanguageModel, 5, false), Tiny(Head::kValue, 6, false), Options(v));
    for (const auto& b : batches) {
      auto m = t.PpoStep(b);
      ASSERT_TRUE(m.ok()) << m.status();
      expected.push_back({*m, Weights(t.policy()), Weights(*t.critic())});
    }
  }
  const std::string groups = TempPath("groups");
  ASSERT_EQ(::mkdir(groups.c_str(), 0755), 0);
  std::vector<std::vector<StepResult>> got(v.world);
  std::vector<std::vector<at::Tensor>> shards(v.world);
  auto status = RunRanks(v.world, [&](int r, DataParallel& dp) -> absl::Status {
    const int host = r / 2, local = r % 2;
    auto connect = [&](const std::string& name, int rank) {
      return DataParallel::Connect({rank, 2, "file://" + groups + "/" + name, absl::Seconds(120)}, at::kCPU,
                                   [](auto s, int rank, int n) {
                                     return c10::make_intrusive<StoreBackendForTest>(s, rank, n);
                                   });
    };
    auto shard_group = connect(absl::StrCat("host", host), local);
    if (!shard_group.ok()) return shard_group.status();
    auto replicate_group = connect(absl::StrCat("replica", local), host);
    if (!replicate_group.ok()) return replicate_group.status();
    std::unique_ptr<Transformer> models[2] = {Tiny(Head::kLanguageModel, 5, true), Tiny(Head::kValue, 6, true)};
    ShardedWeights* sharded[2];
    for (int k = 0; k < 2; ++k) {
      auto sw = ShardedWeights::Shard(*models[k], (*shard_group)->backend(), at::kCPU, at::kFloat,
                                      (*replicate_group)->backend());
      if (!sw.ok()) return sw.status();
      sharded[k] = *sw;
    }
    TrainerOptions opt = Options(v);
    UseShardedModels(&opt);
    Trainer t(std::move(models[0]), std::move(models[1]), opt);
    t.set_collectives(&dp);  // All four ranks: the batch and the metrics.
    for (const auto& b : batches) {
      auto m = t.PpoStep(ShardOf(b, r, v.world), static_cast<int64_t>(b.size()));
      if (!m.ok()) return m.status();
      auto a = sharded[0]->Consolidate();
      auto c = sharded[1]->Consolidate();
      if (!a.ok() || !c.ok()) return absl::InternalError("consolidate");
      got[r].push_back({*m, Weights(**a), Weights(**c)});
    }
    for (const at::Tensor& p : sharded[0]->parameters()) shards[r].push_back(p.detach().clone());
    return absl::OkStatus();
  });
  for (int r = 0; r < v.world; ++r) {
    ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    for (size_t s = 0; s < batches.size(); ++s) {
      const std::string at_step = absl::StrCat("hybrid, rank ", r, ", step ", s + 1);
      for (const auto& [k, x] : expected[s].metrics) {
        if (k == "step_seconds" || k == "tokens_per_second" || k == "rows") continue;
        EXPECT_NEAR(got[r][s].metrics.at(k), x, 1e-5 + 1e-4 * std::abs(x)) << at_step << ": metric " << k;
      }
      ExpectSameWeights(got[r][s].actor, expected[s].actor, at_step + ", actor");
      ExpectSameWeights(got[r][s].critic, expected[s].critic, at_step + ", critic");
    }
  }
  // Replicas (same local rank on the two hosts) hold the same shard, bit for bit.
  for (int local = 0; local < 2; ++local) {
    for (size_t u = 0; u < shards[local].size(); ++u) {
      EXPECT_TRUE(at::equal(shards[local][u], shards[local + 2][u])) << "local rank " << local << ", unit " << u;
    }
  }
}

}  // namespace
}  // namespace kernelrl::learner::dist
