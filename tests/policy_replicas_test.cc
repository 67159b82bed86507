// Two engine replicas behind kernelrl.v1.Policy, each on its own gRPC
// server in this process (tiny Qwen2 on CPU), and the actor's GrpcPolicy
// given both addresses: gRPC's round_robin spreads the calls over the two,
// and every reply carries the version of the replica that served it (the
// replicas hold different versions, so the stamp tells them apart; each
// replica's own count of completed requests must match). A committed
// version published to both then stamps every reply.
#include <map>
#include <memory>
#include <random>

#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "agent/policy/grpc_policy.h"
#include "grpcpp/grpcpp.h"
#include "learner/policy_service.h"
#include "learner/sync/weight_sink.h"
#include "learner/test_util.h"

namespace kernelrl {
namespace {

struct Replica {
  std::unique_ptr<learner::PolicyEngine> engine;
  std::unique_ptr<learner::PolicyService> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

Replica Start(const std::string& model_path, int64_t version) {
  v1::PolicyServerConfig config;
  config.set_enabled(true);
  config.set_model_path(model_path);
  config.set_device("cpu");
  config.set_max_batch(2);
  config.set_max_seq_len(64);
  config.set_initial_policy_version(version);
  Replica r;
  auto engine = learner::MakePolicyEngine(config);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return r;
  r.engine = std::move(*engine);
  r.service = std::make_unique<learner::PolicyService>(r.engine.get());
  grpc::ServerBuilder b;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &r.port);
  b.RegisterService(r.service.get());
  r.server = b.BuildAndStart();
  EXPECT_NE(r.server, nullptr);
  EXPECT_GT(r.port, 0);
  return r;
}

TEST(PolicyReplicasTest, RoundRobinOverReplicasEachStampsItsOwnVersion) {
  const std::string dir = learner::testing::TempDir() + "/replica_fixtures";
  ASSERT_EQ(learner::testing::RunFixtureScript("model", dir), 0) << "see " << dir << ".model.log";
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  const int64_t va = 1 + rng() % 50, vb = va + 1 + rng() % 50;
  Replica a = Start(dir + "/qwen2", va), b = Start(dir + "/qwen2", vb);
  ASSERT_NE(a.server, nullptr);
  ASSERT_NE(b.server, nullptr);

  v1::PolicyBackendConfig config;
  config.set_kind("grpc");
  config.set_address(absl::StrCat("ipv4:127.0.0.1:", a.port, ",127.0.0.1:", b.port));
  config.set_timeout_seconds(120);
  agent::GrpcPolicy policy(config);

  // Until both replicas have served (round_robin reaches the second as soon
  // as it is READY), with a cap that only a policy pinned to one replica
  // (pick_first) would reach.
  std::map<int64_t, int> served;
  int calls = 0;
  while (calls < 200 && (served[va] < 3 || served[vb] < 3)) {
    agent::PolicyRequest req;
    for (int i = 0; i < 4 + static_cast<int>(rng() % 8); ++i) req.prompt_ids.push_back(1 + rng() % 60);
    req.max_new_tokens = 2;
    req.temperature = 1.0f;
    req.top_p = 1.0f;
    req.seed = rng() | 1;
    req.request_id = absl::StrCat("r", calls);
    auto r = policy.Generate(req);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->policy_version == va || r->policy_version == vb) << r->policy_version;
    EXPECT_EQ(r->sampling.policy(), "model");
    ++served[r->policy_version];
    ++calls;
  }
  EXPECT_GE(served[va], 3) << "calls " << calls;
  EXPECT_GE(served[vb], 3) << "calls " << calls;
  // The stamp is the serving replica's: each engine completed exactly the
  // requests stamped with its version.
  EXPECT_EQ(a.engine->GetInfo().requests_completed, served[va]);
  EXPECT_EQ(b.engine->GetInfo().requests_completed, served[vb]);

  // A committed version reaches every replica (the learner's EngineWeightSink):
  // every later reply, whichever replica serves it, carries it.
  const int64_t vc = vb + 1 + rng() % 50;
  learner::EngineWeightSink sink({a.engine.get(), b.engine.get()});
  ASSERT_TRUE(sink.Publish(dir + "/qwen2", vc).ok());
  for (int i = 0; i < 6; ++i) {
    agent::PolicyRequest req;
    req.prompt_ids = {1 + static_cast<int32_t>(rng() % 60), 3, 5};
    req.max_new_tokens = 2;
    req.seed = rng() | 1;
    auto r = policy.Generate(req);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->policy_version, vc);
  }
  EXPECT_EQ(a.engine->GetInfo().policy_version, vc);
  EXPECT_EQ(b.engine->GetInfo().policy_version, vc);
  a.server->Shutdown();
  b.server->Shutdown();
}

}  // namespace
}  // namespace kernelrl
