// The learner binary: serves kernelrl.v1.Learner plus health, diagnostics and
// /metrics (common/service.h). Configuration: proto/learner_config.proto.
#include "common/service.h"
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
  return kernelrl::RunServiceMain(argc, argv, "learner", kDefaults, &config, config.mutable_server(),
                                  [&]() -> absl::StatusOr<std::vector<grpc::Service*>> {
                                    return std::vector<grpc::Service*>{&learner_service};
                                  });
}
