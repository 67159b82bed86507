// The sandbox binary: serves kernelrl.v1.Sandbox plus health, diagnostics and
// /metrics (common/service.h). Configuration: proto/sandbox_config.proto.
// Like RunServiceMain, but it keeps the runner so that a failed GPU health
// probe turns grpc.health.v1 and /healthz to NOT_SERVING.
#include <atomic>
#include <chrono>
#include <iostream>
#include <thread>

#include "common/config.h"
#include "common/log.h"
#include "common/service.h"
#include "proto/sandbox_config.pb.h"
#include "sandbox/evaluator.h"
#include "sandbox/sandbox_service.h"

namespace {
constexpr char kDefaults[] = R"pb(
  server { listen_address: "127.0.0.1" grpc_port: 50052 metrics_port: 9102 drain_seconds: 2 grace_seconds: 30 }
)pb";
}  // namespace

int main(int argc, char** argv) {
  kernelrl::BlockTerminationSignals();
  kernelrl::v1::SandboxConfig config;
  auto request = kernelrl::LoadConfig(argc, argv, kDefaults, &config);
  absl::Status valid = request.ok() ? kernelrl::ValidateServerConfig(config.mutable_server()) : request.status();
  if (!valid.ok()) {
    std::cerr << "sandbox: bad configuration: " << valid.message() << "\n";
    return 2;
  }
  if (request->help) {
    std::cout << kernelrl::ConfigUsage(argv[0], config.GetDescriptor()->full_name());
    return 0;
  }
  if (request->print_config) {
    std::cout << config.DebugString();
    return 0;
  }
  auto evaluator = kernelrl::sandbox::Evaluator::Create(config);
  if (!evaluator.ok()) {
    std::cerr << "sandbox: " << evaluator.status().message() << "\n";
    return 1;
  }
  kernelrl::sandbox::SandboxService service(evaluator->get(), &kernelrl::DefaultRegistry());
  kernelrl::ServiceRunner runner("sandbox", config.server(), {&service});
  if (absl::Status started = runner.Start(); !started.ok()) {
    std::cerr << "sandbox: cannot start: " << started.message() << "\n";
    return 1;
  }
  std::atomic<bool> stop{false};
  std::thread health([&] {
    while (!stop.load()) {
      if (!(*evaluator)->serving() && runner.serving()) runner.SetServing(false);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  });
  const int signal_number = kernelrl::WaitForTerminationSignal();
  KLOG(INFO) << "sandbox: received signal " << signal_number;
  stop.store(true);
  health.join();
  runner.Shutdown();
  return 0;
}
