// The profiler binary: serves kernelrl.v1.Profiler plus health, diagnostics and
// /metrics (common/service.h). Configuration: proto/profiler_config.proto.
#include "common/service.h"
#include "proto/profiler_config.pb.h"
#include "proto/profiler.grpc.pb.h"

namespace {
constexpr char kDefaults[] = R"pb(
  server { listen_address: "127.0.0.1" grpc_port: 50053 metrics_port: 9103 drain_seconds: 2 grace_seconds: 30 }
)pb";
}  // namespace

int main(int argc, char** argv) {
  kernelrl::v1::ProfilerConfig config;
  // The generated base class answers every RPC with UNIMPLEMENTED: nothing
  // pretends to work before the core behind it exists.
  kernelrl::v1::Profiler::Service profiler_service;
  return kernelrl::RunServiceMain(argc, argv, "profiler", kDefaults, &config, config.mutable_server(),
                                  [&]() -> absl::StatusOr<std::vector<grpc::Service*>> {
                                    return std::vector<grpc::Service*>{&profiler_service};
                                  });
}
