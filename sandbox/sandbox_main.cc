// The sandbox binary: serves kernelrl.v1.Sandbox plus health, diagnostics and
// /metrics (common/service.h). Configuration: proto/sandbox_config.proto.
#include "common/service.h"
#include "proto/sandbox_config.pb.h"
#include "proto/sandbox.grpc.pb.h"

namespace {
constexpr char kDefaults[] = R"pb(
  server { listen_address: "127.0.0.1" grpc_port: 50052 metrics_port: 9102 drain_seconds: 2 grace_seconds: 30 }
)pb";
}  // namespace

int main(int argc, char** argv) {
  kernelrl::v1::SandboxConfig config;
  // The generated base class answers every RPC with UNIMPLEMENTED: nothing
  // pretends to work before the core behind it exists.
  kernelrl::v1::Sandbox::Service sandbox_service;
  return kernelrl::RunServiceMain(argc, argv, "sandbox", kDefaults, &config, config.mutable_server(),
                                  [&]() -> absl::StatusOr<std::vector<grpc::Service*>> {
                                    return std::vector<grpc::Service*>{&sandbox_service};
                                  });
}
