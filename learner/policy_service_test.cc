// The gRPC adapter end to end without a network: a tiny Qwen2 checkpoint
// written by transformers, served through PolicyService: the greedy tokens
// equal transformers' generate(), versions and finish reasons come through,
// bad requests map to INVALID_ARGUMENT, bad configs fail to start.
#include "learner/policy_service.h"

#include <chrono>
#include <future>

#include "gtest/gtest.h"
#include "common/gpu_lease.h"
#include "common/json.h"
#include "learner/safetensors.h"
#include "learner/test_util.h"

namespace kernelrl::learner {
namespace {

TEST(PolicyServiceTest, ServesTransformersCheckpointGreedilyAndStampsVersion) {
  const std::string dir = testing::TempDir() + "/policy_service_fixtures";
  ASSERT_EQ(testing::RunFixtureScript("model", dir), 0) << "see " << dir << ".model.log";
  auto fx = ParseJson(*ReadFileToString(dir + "/fixtures.json"));
  ASSERT_TRUE(fx.ok());
  const Json& q = *FindJson(*fx, "qwen2");

  v1::PolicyServerConfig config;
  config.set_enabled(true);
  config.set_model_path(dir + "/qwen2");
  config.set_device("cpu");
  config.set_max_batch(4);
  config.set_max_seq_len(128);
  config.set_initial_policy_version(3);
  auto engine = MakePolicyEngine(config);
  ASSERT_TRUE(engine.ok()) << engine.status();
  PolicyService service(engine->get());

  v1::GenerateRequest req;
  for (const Json& v : *FindJson(q, "prompt")) req.add_prompt_ids(static_cast<int32_t>(*JsonInt(v)));
  req.mutable_sampling()->set_temperature(0);
  req.mutable_sampling()->set_max_new_tokens(64);
  req.set_request_id("t1");
  v1::GenerateResponse resp;
  grpc::Status s = service.Generate(nullptr, &req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  std::vector<int32_t> want;
  for (const Json& v : *FindJson(q, "greedy")) want.push_back(static_cast<int32_t>(*JsonInt(v)));
  EXPECT_EQ(std::vector<int32_t>(resp.output_ids().begin(), resp.output_ids().end()), want);
  EXPECT_EQ(resp.logprobs_size(), 64);
  EXPECT_EQ(resp.policy_version(), 3);
  EXPECT_EQ(resp.finish_reason(), "max_new_tokens");

  v1::WeightVersion version;
  ASSERT_TRUE(service.GetWeightVersion(nullptr, nullptr, &version).ok());
  EXPECT_EQ(version.policy_version(), 3);
  EXPECT_EQ(version.checkpoint_path(), dir + "/qwen2");
  EXPECT_FALSE(version.loaded_at().empty());

  // Hot swap from a checkpoint directory (here: the Llama fixture).
  ASSERT_TRUE((*engine)->SwapWeightsFrom(dir + "/llama", 4).ok());
  req.clear_prompt_ids();
  for (const Json& v : *FindJson(*FindJson(*fx, "llama"), "prompt")) req.add_prompt_ids(static_cast<int32_t>(*JsonInt(v)));
  resp.Clear();
  ASSERT_TRUE(service.Generate(nullptr, &req, &resp).ok());
  EXPECT_EQ(resp.policy_version(), 4);
  want.clear();
  for (const Json& v : *FindJson(*FindJson(*fx, "llama"), "greedy")) want.push_back(static_cast<int32_t>(*JsonInt(v)));
  EXPECT_EQ(std::vector<int32_t>(resp.output_ids().begin(), resp.output_ids().end()), want);

  req.add_prompt_ids(1 << 20);  // Outside the vocabulary.
  EXPECT_EQ(service.Generate(nullptr, &req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // On the CPU the engine takes no GPU lease (a sandbox worker timing on the GPU holds it
  // exclusively here) and no CUDA graphs: it serves while the lease is held.
  const GpuLease lease(testing::TempDir() + "/policy_service.gpu.lease");
  absl::StatusOr<GpuLease::Hold> timer = lease.Exclusive();
  ASSERT_TRUE(timer.ok()) << timer.status();
  config.set_cuda_graph_decode(true);
  req.clear_prompt_ids();
  for (const Json& v : *FindJson(q, "prompt")) req.add_prompt_ids(static_cast<int32_t>(*JsonInt(v)));
  std::unique_ptr<PolicyEngine> outside;
  auto serve = std::async(std::launch::async, [&]() -> absl::StatusOr<std::vector<int32_t>> {
    auto e = MakePolicyEngine(config, lease.path());
    if (!e.ok()) return e.status();
    outside = std::move(*e);
    v1::GenerateResponse got;
    grpc::Status st = PolicyService(outside.get()).Generate(nullptr, &req, &got);
    if (!st.ok()) return absl::InternalError(st.error_message());
    return std::vector<int32_t>(got.output_ids().begin(), got.output_ids().end());
  });
  const bool served_while_held = serve.wait_for(std::chrono::seconds(120)) == std::future_status::ready;
  timer->Release();  // Lets an engine that did wait for it finish, so the test fails instead of hanging.
  EXPECT_TRUE(served_while_held) << "the CPU engine waited for the GPU lease";
  auto served = serve.get();
  ASSERT_TRUE(served.ok()) << served.status();
  want.clear();
  for (const Json& v : *FindJson(q, "greedy")) want.push_back(static_cast<int32_t>(*JsonInt(v)));
  EXPECT_EQ(*served, want);
  EXPECT_EQ(outside->GetInfo().gpu_lease_wait_s, 0.0);
  config.set_cuda_graph_decode(false);

  config.set_device("tpu");
  EXPECT_EQ(MakePolicyEngine(config).status().code(), absl::StatusCode::kInvalidArgument);
  config.set_device("cpu");
  config.set_model_path(dir + "/missing");
  EXPECT_FALSE(MakePolicyEngine(config).ok());
}

}  // namespace
}  // namespace kernelrl::learner
