// The learner binary: serves kernelrl.v1.Learner plus health, diagnostics and
// /metrics (common/service.h). Configuration: proto/learner_config.proto.
#include "common/service.h"
#include "learner/policy_service.h"
#include "proto/learner_config.pb.h"
#include "proto/learner.grpc.pb.h"

namespace {
constexpr char kDefaults[] = R"pb(
  server { listen_address: "127.0.0.1" grpc_port: 50051 metrics_port: 9101 drain_seconds: 2 grace_seconds: 30 }
)pb";
}  // namespace

int main(int argc, char** argv) {
  kernelrl::v1::LearnerConfig config;
  // The generated base class answers every RPC with UNIMPLEMENTED: nothing
  // pretends to work before the core behind it exists.
  kernelrl::v1::Learner::Service learner_service;
  // kernelrl.v1.Policy, when `policy { enabled: true model_path: ... }`.
  std::unique_ptr<kernelrl::learner::PolicyEngine> engine;
  std::unique_ptr<kernelrl::learner::PolicyService> policy_service;
  return kernelrl::RunServiceMain(argc, argv, "learner", kDefaults, &config, config.mutable_server(),
                                  [&]() -> absl::StatusOr<std::vector<grpc::Service*>> {
                                    std::vector<grpc::Service*> services = {&learner_service};
                                    if (config.policy().enabled()) {
                                      auto e = kernelrl::learner::MakePolicyEngine(config.policy());
                                      if (!e.ok()) return e.status();
                                      engine = std::move(*e);
                                      policy_service = std::make_unique<kernelrl::learner::PolicyService>(engine.get());
                                      services.push_back(policy_service.get());
                                    }
                                    return services;
                                  });
}
