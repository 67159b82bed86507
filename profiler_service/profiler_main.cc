// The profiler binary: serves kernelrl.v1.Profiler plus health, diagnostics and
// /metrics (common/service.h). Configuration: proto/profiler_config.proto.
#include <memory>

#include "common/metrics.h"
#include "common/service.h"
#include "profiler_service/profiler_core.h"
#include "profiler_service/profiler_service.h"
#include "proto/profiler_config.pb.h"

namespace {
constexpr char kDefaults[] = R"pb(
  server { listen_address: "127.0.0.1" grpc_port: 50053 metrics_port: 9103 drain_seconds: 2 grace_seconds: 30 }
)pb";
}  // namespace

int main(int argc, char** argv) {
  kernelrl::v1::ProfilerConfig config;
  std::unique_ptr<kernelrl::ProfilerCore> core;
  std::unique_ptr<kernelrl::ProfilerServiceImpl> service;
  return kernelrl::RunServiceMain(
      argc, argv, "profiler", kDefaults, &config, config.mutable_server(),
      [&]() -> absl::StatusOr<std::vector<grpc::Service*>> {
        // Built after the config is loaded: the core keeps its own copy.
        core = std::make_unique<kernelrl::ProfilerCore>(config, config.gpu_model(), config.torch_version(),
                                                        &kernelrl::DefaultRegistry());
        service = std::make_unique<kernelrl::ProfilerServiceImpl>(core.get());
        return std::vector<grpc::Service*>{service.get()};
      });
}
