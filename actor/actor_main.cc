// The actor binary: a rollout worker. It serves no RPCs of its own (it is a
// client of the learner, the policy and the sandboxes), only health,
// diagnostics and /metrics. Rollouts arrive with the actor issue.
#include "common/service.h"
#include "proto/actor_config.pb.h"

namespace {
constexpr char kDefaults[] = R"pb(
  server { listen_address: "127.0.0.1" grpc_port: 50054 metrics_port: 9104 drain_seconds: 2 grace_seconds: 30 }
  learner_address: "127.0.0.1:50051"
  policy_address: "127.0.0.1:50051"
  sandbox_address: "127.0.0.1:50052"
)pb";
}  // namespace

int main(int argc, char** argv) {
  kernelrl::v1::ActorConfig config;
  return kernelrl::RunServiceMain(argc, argv, "actor", kDefaults, &config, config.mutable_server(),
                                  [&]() -> absl::StatusOr<std::vector<grpc::Service*>> {
                                    return std::vector<grpc::Service*>{};
                                  });
}
