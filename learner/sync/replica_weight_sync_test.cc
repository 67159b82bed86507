// Policy replicas in other processes, on the CPU: the learner (rank 0 of the
// sync group) publishes through CollectiveWeightSink, two replicas (ranks as
// threads, FileStore rendezvous, the test store backend for the broadcasts)
// run ReplicaWeightReceiver into their own engines. Each publication returns
// only once both replicas have the version queued: a request sent after it
// is stamped with it and served by weights equal to the learner's (LoRA
// adapters merged). The sink's end stops the receivers, each acknowledging
// it first; a replica that never acknowledges fails the publication at the
// timeout.
#include "learner/sync/replica_weight_sync.h"

#include <atomic>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/testing/testing.h"
#include "gtest/gtest.h"
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

// A replica process's part: its engine, and the weights its receiver swapped in last.
struct Replica {
  std::unique_ptr<PolicyEngine> engine;
  absl::Mutex mu;
  Named served ABSL_GUARDED_BY(mu);
  absl::Status run;
};

TEST(ReplicaWeightSyncTest, TwoReplicasServeEachVersionOnceThePublishReturns) {
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  const std::string store = "file://" + ::kernelrl::testing::NewTempDir("replica_sync_") + "/sync";
  constexpr int kReplicas = 2;
  std::vector<std::unique_ptr<Replica>> replicas;
  std::vector<std::thread> threads;
  for (int r = 1; r <= kReplicas; ++r) {
    replicas.push_back(std::make_unique<Replica>());
    Replica* rep = replicas.back().get();
    rep->engine = std::make_unique<PolicyEngine>(Tiny(seed + 100 + r, false), 0, "init", EngineOptions{2, 64, 256, {}});
    threads.emplace_back([rep, r, &store] {
      rep->run = [&]() -> absl::Status {
        auto sync = Join(store, r, 1 + kReplicas);
        if (!sync.ok()) return sync.status();
        ReplicaWeightReceiver receiver(sync->get(), ModelOptions{}, [rep](std::unique_ptr<Transformer> m, int64_t v) {
          {
            absl::MutexLock lock(&rep->mu);
            rep->served = Snapshot(*m);
          }
          rep->engine->SwapWeights(std::move(m), v, absl::StrCat("c10d:version-", v));
        });
        std::atomic<bool> stop{false};
        return receiver.Run(stop, absl::Milliseconds(200));
      }();
    });
  }
  {
    auto sync = Join(store, 0, 1 + kReplicas);
    ASSERT_TRUE(sync.ok()) << sync.status();
    CollectiveWeightSink sink(std::move(*sync), {});
    EXPECT_EQ(sink.replicas(), kReplicas);
    const int64_t v1 = 1 + seed % 100;
    auto policy = Tiny(seed, /*trainable=*/true);
    ASSERT_TRUE(sink.PublishModel(*policy, v1).ok());
    for (auto& rep : replicas) {
      EXPECT_EQ(Stamp(rep->engine.get()), v1);
      absl::MutexLock lock(&rep->mu);
      ExpectEqual(rep->served, Snapshot(*policy), "version 1");
    }
    // The next version: other weights, with LoRA adapters (served merged).
    auto next = Tiny(seed + 1, /*trainable=*/true, /*lora=*/2);
    {
      at::NoGradGuard no_grad;
      for (at::Tensor& p : next->parameters()) p.add_(at::randn_like(p) * 0.01);
    }
    ASSERT_TRUE(sink.PublishModel(*next, v1 + 1).ok());
    for (auto& rep : replicas) {
      EXPECT_EQ(Stamp(rep->engine.get()), v1 + 1);
      absl::MutexLock lock(&rep->mu);
      ExpectEqual(rep->served, Snapshot(*next), "version 2, adapters merged");
    }
  }  // The sink announces the end: each receiver returns.
  for (auto& t : threads) t.join();
  for (auto& rep : replicas) EXPECT_TRUE(rep->run.ok()) << rep->run;
}

TEST(ReplicaWeightSyncTest, AReplicaThatNeverAcknowledgesFailsThePublishAtTheTimeout) {
  const std::string store = "file://" + ::kernelrl::testing::NewTempDir("replica_sync_") + "/sync";
  absl::Notification done;
  absl::Status joined;
  std::thread silent([&] {
    auto sync = Join(store, 1, 2);  // Joins the group, never receives.
    joined = sync.status();
    done.WaitForNotification();
  });
  {
    auto sync = Join(store, 0, 2);
    ASSERT_TRUE(sync.ok()) << sync.status();
    CollectiveWeightSink::Options o;
    o.ack_timeout = absl::Milliseconds(300);
    CollectiveWeightSink sink(std::move(*sync), o);
    auto policy = Tiny(7, /*trainable=*/false);
    const absl::Status s = sink.PublishModel(*policy, 3);
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    EXPECT_NE(s.message().find("policy replica 1 did not take version 3"), std::string::npos) << s;
  }
  done.Notify();
  silent.join();
  EXPECT_TRUE(joined.ok()) << joined;
}

// The end, step by step on the store (the keys of replica_weight_sync.h):
// a replica acknowledges "stop" before its receiver returns, which is what
// lets both sides destroy their communicators together.
TEST(ReplicaWeightSyncTest, AReplicaAcknowledgesTheEndBeforeItsReceiverReturns) {
  const std::string store = "file://" + ::kernelrl::testing::NewTempDir("replica_sync_") + "/sync";
  absl::Status run;
  std::thread replica([&] {
    auto sync = Join(store, 1, 2);
    if (!sync.ok()) {
      run = sync.status();
      return;
    }
    ReplicaWeightReceiver receiver(sync->get(), ModelOptions{}, [](std::unique_ptr<Transformer>, int64_t) {});
    std::atomic<bool> stop{false};
    run = receiver.Run(stop, absl::Milliseconds(100));
  });
  auto learner = Join(store, 0, 2);
  ASSERT_TRUE(learner.ok()) << learner.status();
  ASSERT_TRUE((*learner)->StoreSet("weights/0", "stop").ok());
  auto ack = (*learner)->StoreGet("weights/0/1", absl::Seconds(60));
  ASSERT_TRUE(ack.ok()) << ack.status();
  EXPECT_EQ(*ack, "stop");
  replica.join();
  EXPECT_TRUE(run.ok()) << run;
  (*learner)->Shutdown();
}

}  // namespace
}  // namespace kernelrl::learner
