// The gRPC adapter end to end over a real channel (CPU backend): a unary
// Evaluate, a streamed Evaluate with stage progress, and the metrics.
#include "sandbox/sandbox_service.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <thread>
#include <utility>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "sandbox/tests/e2e_util.h"

namespace kernelrl::sandbox {
namespace {

// `service` on a local port, and a stub for it (null when the server did not start).
std::pair<std::unique_ptr<grpc::Server>, std::unique_ptr<v1::Sandbox::Stub>> Serve(SandboxService* service) {
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) return {nullptr, nullptr};
  return {std::move(server), v1::Sandbox::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                                      grpc::InsecureChannelCredentials()))};
}

TEST(SandboxServiceTest, EvaluateAndStreamOverGrpc) {
  const std::string python = testing::FindTorchPython();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch on this machine";
  auto evaluator = Evaluator::Create(testing::CpuConfig(python));
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  MetricsRegistry metrics;
  SandboxService service(evaluator->get(), &metrics);
  auto [server, stub] = Serve(&service);
  ASSERT_NE(stub, nullptr);
  EvaluateRequest req = testing::Request("sandbox/testdata/cpu_tasks/relu.py", "sandbox/solutions/cpu/relu");
  {
    grpc::ClientContext ctx;
    Verdict v;
    ASSERT_TRUE(stub->Evaluate(&ctx, req, &v).ok());
    EXPECT_EQ(v.outcome(), Verdict::OK) << v.summary();
  }
  {
    grpc::ClientContext ctx;
    auto reader = stub->EvaluateStream(&ctx, testing::Request("sandbox/testdata/cpu_tasks/relu.py",
                                                              "sandbox/exploits/cpu/torch_in_forward"));
    v1::EvaluateProgress p;
    std::vector<std::string> stages;
    Verdict last;
    while (reader->Read(&p)) {
      stages.push_back(p.stage() + (p.finished() ? ":end" : ":start"));
      if (p.has_verdict()) last = p.verdict();
    }
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_EQ(last.outcome(), Verdict::HACK_DETECTED) << last.summary();
    EXPECT_EQ(stages.front(), "validate:start");
    EXPECT_EQ(stages.back(), "done:end");
    EXPECT_NE(std::find(stages.begin(), stages.end(), "verify:end"), stages.end());
  }
  const std::string text = metrics.Expose();
  EXPECT_NE(text.find("kernelrl_sandbox_evaluations_total{outcome=\"OK\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("kernelrl_sandbox_evaluations_total{outcome=\"HACK_DETECTED\"} 1"), std::string::npos);
  EXPECT_NE(text.find("kernelrl_sandbox_stage_seconds_count{stage=\"verify\"} 2"), std::string::npos);
  EXPECT_NE(text.find("kernelrl_sandbox_queue_depth{stage=\"verify_waiting\"} 0"), std::string::npos);
  EXPECT_NE(text.find("kernelrl_sandbox_serving 1"), std::string::npos);
  server->Shutdown();
}

// A call whose client gave up (its deadline passed while its job waited for the GPU another job
// holds) is dropped at its next stage: no verify runs for it, no outcome counts it, and
// kernelrl_sandbox_abandoned_total does.
TEST(SandboxServiceTest, ACallWhoseClientGaveUpIsDroppedNotJudged) {
  const std::string python = testing::FindTorchPython();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch on this machine";
  auto evaluator = Evaluator::Create(testing::CpuConfig(python));  // one zygote: a job holds the GPU alone
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  MetricsRegistry metrics;
  SandboxService service(evaluator->get(), &metrics);
  auto [server, stub] = Serve(&service);
  ASSERT_NE(stub, nullptr);
  const EvaluateRequest req = testing::Request("sandbox/testdata/cpu_tasks/relu.py", "sandbox/solutions/cpu/relu");
  absl::Notification holding, release;
  Verdict held;
  std::thread holder([&] {
    held = (*evaluator)->Evaluate(req, [&](const std::string& stage, bool finished, const std::string&) {
      if (stage != "gpu_queue" || !finished) return;
      holding.Notify();
      release.WaitForNotificationWithTimeout(absl::Seconds(300));
    });
  });
  ASSERT_TRUE(holding.WaitForNotificationWithTimeout(absl::Seconds(120)));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  Verdict v;
  EXPECT_EQ(stub->Evaluate(&ctx, req, &v).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  release.Notify();
  holder.join();
  server->Shutdown();  // waits for the abandoned call's handler to end
  EXPECT_EQ(held.outcome(), Verdict::OK) << held.summary();
  const std::string text = metrics.Expose();
  EXPECT_NE(text.find("kernelrl_sandbox_abandoned_total{when=\"dropped_before_a_stage\"} 1"), std::string::npos) << text;
  EXPECT_EQ(text.find("kernelrl_sandbox_evaluations_total"), std::string::npos) << "the dropped call counted as an outcome";
}

// A worker killed mid-job leaves work_root/job-<pid>-<n> behind (seen on the
// GPU machine after a cut run: the next worker's job failed with "File
// exists"). A new worker removes dirs of dead pids and keeps live ones.
TEST(SandboxServiceTest, NewWorkerRemovesJobDirsOfDeadWorkers) {
  const std::string python = testing::FindTorchPython();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch on this machine";
  SandboxConfig config = testing::CpuConfig(python);
  config.set_work_root(config.work_root() + "-stale");
  long dead = 999999;
  while (kill(static_cast<pid_t>(dead), 0) == 0 || errno != ESRCH) --dead;
  const std::string stale = config.work_root() + "/job-" + std::to_string(dead) + "-26";
  const std::string live = config.work_root() + "/job-" + std::to_string(getppid()) + "-3";
  mkdir(config.work_root().c_str(), 0700);
  for (const std::string& d : {stale, live, stale + "/ws"}) ASSERT_EQ(mkdir(d.c_str(), 0700), 0) << d;
  auto evaluator = Evaluator::Create(config);
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  struct stat st;
  EXPECT_NE(stat(stale.c_str(), &st), 0) << "a dead worker's job dir stays: " << stale;
  EXPECT_EQ(stat(live.c_str(), &st), 0) << "a live worker's job dir was removed: " << live;
  Verdict v = (*evaluator)->Evaluate(testing::Request("sandbox/testdata/cpu_tasks/relu.py", "sandbox/solutions/cpu/relu"),
                                nullptr);
  EXPECT_EQ(v.outcome(), Verdict::OK) << v.summary();
}

}  // namespace
}  // namespace kernelrl::sandbox
