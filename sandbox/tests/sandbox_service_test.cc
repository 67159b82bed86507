// The gRPC adapter end to end over a real channel (CPU backend): a unary
// Evaluate, a streamed Evaluate with stage progress, and the metrics.
#include "sandbox/sandbox_service.h"

#include <algorithm>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "sandbox/tests/e2e_util.h"

namespace kernelrl::sandbox {
namespace {

TEST(SandboxServiceTest, EvaluateAndStreamOverGrpc) {
  const std::string python = testing::FindTorchPython();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch on this machine";
  auto evaluator = Evaluator::Create(testing::CpuConfig(python));
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  MetricsRegistry metrics;
  SandboxService service(evaluator->get(), &metrics);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_GT(port, 0);
  auto stub = v1::Sandbox::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                       grpc::InsecureChannelCredentials()));
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

}  // namespace
}  // namespace kernelrl::sandbox
