// SandboxPool over real gRPC against in-process fake workers: round-robin
// spread, a NOT_SERVING worker gets no work, infrastructure failures are
// retried once elsewhere and then become INFRA_ERROR.
#include "actor/sandbox_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/testing.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"

namespace kernelrl::actor {
namespace {

class FakeWorker final : public v1::Sandbox::Service {
 public:
  explicit FakeWorker(std::string id) : id_(std::move(id)) {}
  grpc::Status Evaluate(grpc::ServerContext*, const v1::EvaluateRequest* req, v1::Verdict* v) override {
    ++calls;
    if (fail_rpc) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker lost its GPU");
    v->set_worker_id(id_);
    v->set_outcome(infra ? v1::Verdict::INFRA_ERROR : v1::Verdict::OK);
    v->set_summary(req->request_id());
    return grpc::Status::OK;
  }
  std::atomic<int> calls{0};
  std::atomic<bool> fail_rpc{false}, infra{false};

 private:
  const std::string id_;
};

struct Fleet {
  explicit Fleet(int n) {
    grpc::EnableDefaultHealthCheckService(true);
    for (int i = 0; i < n; ++i) {
      workers.push_back(std::make_unique<FakeWorker>(absl::StrCat("w", i)));
      int port = 0;
      grpc::ServerBuilder b;
      b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
      b.RegisterService(workers.back().get());
      servers.push_back(b.BuildAndStart());
      addresses += (i ? "," : "") + absl::StrCat("127.0.0.1:", port);
    }
  }
  ~Fleet() {
    for (auto& s : servers) s->Shutdown();
  }
  v1::SandboxPoolConfig Config() const {
    v1::SandboxPoolConfig c;
    c.set_target("ipv4:" + addresses);
    c.set_health_check(true);
    c.set_deadline_seconds(5);
    c.set_retries(1);
    return c;
  }
  std::vector<std::unique_ptr<FakeWorker>> workers;
  std::vector<std::unique_ptr<grpc::Server>> servers;
  std::string addresses;
};

v1::EvaluateRequest Req(int i) {
  v1::EvaluateRequest r;
  r.set_request_id(absl::StrCat("r", i));
  return r;
}

// Whether `n` requests in a row avoid `worker`: with round-robin over 3
// workers, 3 or more in a row avoid one only once the pool routes around it.
bool RoutedAround(SandboxPool* pool, const std::string& worker, int n, int* next_id) {
  for (int i = 0; i < n; ++i) {
    if (pool->Evaluate(Req((*next_id)++)).worker_id() == worker) return false;
  }
  return true;
}

TEST(SandboxPoolTest, RoundRobinSpreadsAndSkipsNotServingWorkers) {
  Fleet fleet(3);
  auto pool = SandboxPool::Create(fleet.Config());
  ASSERT_TRUE(pool.ok());
  // Round robin spreads over the workers it is connected to; on a loaded machine one may connect
  // after the first calls, so wait until each has served one (an event), then count.
  int warm = 500;
  ASSERT_TRUE(::kernelrl::testing::WaitFor(
      [&] {
        EXPECT_EQ((*pool)->Evaluate(Req(warm++)).outcome(), v1::Verdict::OK);
        for (auto& w : fleet.workers) {
          if (w->calls.load() == 0) return false;
        }
        return true;
      },
      absl::Seconds(60)));
  std::vector<int> served;
  for (auto& w : fleet.workers) served.push_back(w->calls.load());
  for (int i = 0; i < 30; ++i) ASSERT_EQ((*pool)->Evaluate(Req(i)).outcome(), v1::Verdict::OK);
  for (size_t i = 0; i < fleet.workers.size(); ++i) {
    EXPECT_GE(fleet.workers[i]->calls.load() - served[i], 5) << "uneven spread";
  }
  // Worker 1 drains: health NOT_SERVING. After the watch notices, it gets nothing.
  // Waits for the pool's health watch to see it (an event, not a fixed time).
  fleet.servers[1]->GetHealthCheckService()->SetServingStatus(false);
  int id = 1000;
  ASSERT_TRUE(::kernelrl::testing::WaitFor([&] { return RoutedAround(pool->get(), "w1", 6, &id); }, absl::Seconds(60)));
  const int before = fleet.workers[1]->calls.load();
  for (int i = 0; i < 30; ++i) {
    v1::Verdict v = (*pool)->Evaluate(Req(100 + i));
    ASSERT_EQ(v.outcome(), v1::Verdict::OK);
    EXPECT_NE(v.worker_id(), "w1");
  }
  EXPECT_EQ(fleet.workers[1]->calls.load(), before);
  fleet.servers[1]->GetHealthCheckService()->SetServingStatus(true);
  EXPECT_TRUE(::kernelrl::testing::WaitFor(
      [&] {
        (*pool)->Evaluate(Req(id++));
        return fleet.workers[1]->calls.load() > before;
      },
      absl::Seconds(60)));
}

TEST(SandboxPoolTest, InfrastructureFailuresRetryElsewhereOnceThenInfraError) {
  Fleet fleet(2);
  auto pool = SandboxPool::Create(fleet.Config());
  ASSERT_TRUE(pool.ok());
  for (int i = 0; i < 6; ++i) ASSERT_EQ((*pool)->Evaluate(Req(i)).outcome(), v1::Verdict::OK);  // Both connected.
  fleet.workers[0]->fail_rpc = true;
  for (int i = 0; i < 10; ++i) {
    v1::Verdict v = (*pool)->Evaluate(Req(i));
    EXPECT_EQ(v.outcome(), v1::Verdict::OK) << v.summary();
    EXPECT_EQ(v.worker_id(), "w1");
  }
  fleet.workers[1]->infra = true;  // Now every worker fails: one retry, then INFRA_ERROR.
  const int64_t before = (*pool)->attempts();
  v1::Verdict v = (*pool)->Evaluate(Req(99));
  EXPECT_EQ(v.outcome(), v1::Verdict::INFRA_ERROR);
  EXPECT_TRUE(absl::StrContains(v.summary(), "sandbox pool:")) << v.summary();
  EXPECT_EQ((*pool)->attempts() - before, 2);
}

TEST(SandboxPoolTest, NoWorkerIsAnInfraErrorAfterTheDeadline) {
  v1::SandboxPoolConfig c;
  c.set_target("ipv4:127.0.0.1:1");
  c.set_deadline_seconds(0.3);
  c.set_retries(1);
  auto pool = SandboxPool::Create(c);
  ASSERT_TRUE(pool.ok());
  v1::Verdict v = (*pool)->Evaluate(Req(0));
  EXPECT_EQ(v.outcome(), v1::Verdict::INFRA_ERROR);
  EXPECT_FALSE(SandboxPool::Create(v1::SandboxPoolConfig()).ok());
}

}  // namespace
}  // namespace kernelrl::actor
