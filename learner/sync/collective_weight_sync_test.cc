// Weight sync without disk on the CPU: two learner ranks shard a tiny model
// (learner/dist/fsdp.h) and one replica holds a policy engine with other
// weights; ranks are threads meeting through c10d FileStores, collectives
// through the test store backend (the wheel's gloo has no headers). After
// each sync the replica's weights equal the learner's, bit for bit, and its
// engine stamps replies with the new version. The second round follows a
// change of every rank's shard, so stale or mixed-up units would show.
#include "learner/sync/collective_weight_sync.h"

#include <map>
#include <random>
#include <thread>

#include <ATen/CPUGeneratorImpl.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/testing/testing.h"
#include "gtest/gtest.h"
#include "learner/dist/data_parallel.h"
#include "learner/dist/store_backend_for_test.h"
#include "learner/policy/engine.h"
#include "learner/sync/sync_test_util.h"

namespace kernelrl::learner {
namespace {

using sync_testing::ExpectEqual;
using sync_testing::Join;
using sync_testing::Named;
using sync_testing::Snapshot;
using sync_testing::Stamp;
using sync_testing::Tiny;

TEST(CollectiveWeightSyncTest, TwoShardedRanksToOneReplicaWeightsEqualVersionAdvances) {
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  const uint64_t learner_seed = seed, replica_seed = seed + 1;
  const std::string dir = ::kernelrl::testing::NewTempDir("weight_sync_");
  const std::string train_store = "file://" + dir + "/train", sync_store = "file://" + dir + "/sync";
  const Named round1 = Snapshot(*Tiny(learner_seed, false));
  const int64_t v1 = 1 + seed % 100, v2 = v1 + 1;

  Named round2;  // The learner's weights after its shards change (written by rank 0).
  absl::Notification round2_ready;
  std::vector<absl::Status> status(3);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      status[rank] = [&]() -> absl::Status {
        auto train = Join(train_store, rank, 2);
        if (!train.ok()) return train.status();
        std::unique_ptr<dist::DataParallel> sync;
        if (rank == 0) {
          auto s = Join(sync_store, 0, 2);
          if (!s.ok()) return s.status();
          sync = std::move(*s);
        }
        auto model = Tiny(learner_seed, true);
        auto weights = dist::ShardedWeights::Shard(*model, (*train)->backend(), at::kCPU, at::kFloat);
        if (!weights.ok()) return weights.status();
        c10d::Backend* to = sync ? sync->backend().get() : nullptr;
        if (auto s = SendWeights(**weights, to, v1); !s.ok()) return s;
        // An update: every rank changes its own shard.
        at::Generator gen = at::detail::createCPUGenerator(seed * 7 + rank);
        {
          at::NoGradGuard no_grad;
          for (at::Tensor& shard : (*weights)->parameters()) shard.add_(at::randn(shard.sizes(), gen) * 0.01);
        }
        auto whole = (*weights)->Consolidate();  // Collective: every rank.
        if (!whole.ok()) return whole.status();
        if (rank == 0) {
          round2 = Snapshot(**whole);
          round2_ready.Notify();
        }
        return SendWeights(**weights, to, v2);
      }();
    });
  }
  auto engine = std::make_unique<PolicyEngine>(Tiny(replica_seed, false), 0, "init", EngineOptions{2, 64, 256, {}});
  ASSERT_EQ(Stamp(engine.get()), 0);
  threads.emplace_back([&] {
    status[2] = [&]() -> absl::Status {
      auto sync = Join(sync_store, 1, 2);
      if (!sync.ok()) return sync.status();
      ModelOptions o;
      auto got = ReceiveWeights(*(*sync)->backend(), o);
      if (!got.ok()) return got.status();
      EXPECT_EQ(got->policy_version, v1);
      ExpectEqual(Snapshot(*got->model), round1, "round 1");
      engine->SwapWeights(std::move(got->model), got->policy_version, "c10d");
      EXPECT_EQ(Stamp(engine.get()), v1);
      auto version = ReceiveIntoEngine(*(*sync)->backend(), o, engine.get());
      if (!version.ok()) return version.status();
      EXPECT_EQ(*version, v2);
      EXPECT_EQ(Stamp(engine.get()), v2);
      return absl::OkStatus();
    }();
  });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(status[i].ok()) << "thread " << i << ": " << status[i];
  ASSERT_TRUE(round2_ready.HasBeenNotified());
  EXPECT_FALSE(at::equal(round2.front().second, round1.front().second));  // The update changed the weights.
}

// The received model of round 2 compared against the consolidated learner:
// a replica keeping any unit of round 1 fails.
// lora > 0: the learner trains adapters on a frozen base; the replica
// receives both parts of every unit and serves them merged.
void ExpectSecondVersionReplacesEveryUnit(int64_t lora) {
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  const std::string dir = ::kernelrl::testing::NewTempDir("weight_sync_");
  const std::string train_store = "file://" + dir + "/train", sync_store = "file://" + dir + "/sync";
  Named want;
  absl::Notification want_ready;
  std::vector<absl::Status> status(3);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      status[rank] = [&]() -> absl::Status {
        auto train = Join(train_store, rank, 2);
        if (!train.ok()) return train.status();
        std::unique_ptr<dist::DataParallel> sync;
        if (rank == 0) {
          auto s = Join(sync_store, 0, 2);
          if (!s.ok()) return s.status();
          sync = std::move(*s);
        }
        auto model = Tiny(seed, true, lora);
        auto weights = dist::ShardedWeights::Shard(*model, (*train)->backend(), at::kCPU, at::kFloat);
        if (!weights.ok()) return weights.status();
        c10d::Backend* to = sync ? sync->backend().get() : nullptr;
        if (auto s = SendWeights(**weights, to, 1); !s.ok()) return s;
        {
          at::NoGradGuard no_grad;
          for (at::Tensor& shard : (*weights)->parameters()) shard.mul_(-1.5).add_(0.25);
        }
        auto whole = (*weights)->Consolidate();
        if (!whole.ok()) return whole.status();
        if (rank == 0) {
          want = Snapshot(**whole);
          want_ready.Notify();
        }
        return SendWeights(**weights, to, 2);
      }();
    });
  }
  threads.emplace_back([&] {
    status[2] = [&]() -> absl::Status {
      auto sync = Join(sync_store, 1, 2);
      if (!sync.ok()) return sync.status();
      auto first = ReceiveWeights(*(*sync)->backend(), ModelOptions{});
      if (!first.ok()) return first.status();
      auto second = ReceiveWeights(*(*sync)->backend(), ModelOptions{});
      if (!second.ok()) return second.status();
      EXPECT_EQ(second->policy_version, 2);
      EXPECT_FALSE(second->model->has_adapters());
      want_ready.WaitForNotification();
      ExpectEqual(Snapshot(*second->model), want, "round 2");
      return absl::OkStatus();
    }();
  });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(status[i].ok()) << "thread " << i << ": " << status[i];
  if (lora > 0) {  // The update reached the served weights through the adapters.
    const Named base = Snapshot(*Tiny(seed, false));
    ASSERT_EQ(want[2].first, "model.layers.0.self_attn.q_proj.weight");
    EXPECT_FALSE(at::equal(want[2].second, base[2].second));
    EXPECT_TRUE(at::equal(want[1].second, base[1].second)) << want[1].first << ": frozen, not adapted";
  }
}

TEST(CollectiveWeightSyncTest, SecondVersionReplacesEveryUnit) { ExpectSecondVersionReplacesEveryUnit(0); }

TEST(CollectiveWeightSyncTest, LoraAdaptersReachTheReplicaMerged) { ExpectSecondVersionReplacesEveryUnit(4); }

}  // namespace
}  // namespace kernelrl::learner
