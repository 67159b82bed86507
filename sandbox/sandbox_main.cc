// The sandbox binary: serves kernelrl.v1.Sandbox plus health, diagnostics and
// /metrics (common/service.h). Configuration: proto/sandbox_config.proto.
// Health follows the evaluator: a failed GPU health probe turns
// grpc.health.v1 and /healthz to NOT_SERVING.
#include <memory>

#include "common/service.h"
#include "proto/sandbox_config.pb.h"
#include "sandbox/child_env.h"
#include "sandbox/evaluator.h"
#include "sandbox/sandbox_service.h"

namespace {
constexpr char kDefaults[] = R"pb(
  server { listen_address: "127.0.0.1" grpc_port: 50052 metrics_port: 9102 drain_seconds: 2 grace_seconds: 30 }
)pb";
}  // namespace

int main(int argc, char** argv) {
  kernelrl::v1::SandboxConfig config;
  std::unique_ptr<kernelrl::sandbox::Evaluator> evaluator;
  std::unique_ptr<kernelrl::sandbox::SandboxService> service;
  return kernelrl::RunServiceMain(
      argc, argv, "sandbox", kDefaults, &config, config.mutable_server(),
      [&]() -> absl::StatusOr<std::vector<grpc::Service*>> {
        kernelrl::sandbox::ResolveChildEnvironmentFromHost(&config);
        auto created = kernelrl::sandbox::Evaluator::Create(config);
        if (!created.ok()) return created.status();
        evaluator = std::move(created).value();
        service = std::make_unique<kernelrl::sandbox::SandboxService>(evaluator.get(), &kernelrl::DefaultRegistry());
        return std::vector<grpc::Service*>{service.get()};
      },
      [&] { return evaluator->serving(); });
}
