// ServiceRunner: what every kernelrl binary does around its gRPC services.
//
//   Start():    gRPC server on server.grpc_port with the given services, the
//               standard grpc.health.v1 service (SERVING), kernelrl.v1.Diagnostics,
//               Prometheus /metrics and /healthz over HTTP (cpp-httplib, the
//               tree's one HTTP server library), and the port file.
//   Shutdown(): the graceful sequence, in order —
//               1. health → NOT_SERVING (load balancers stop sending),
//               2. keep serving for drain_seconds (in-flight and late calls finish),
//               3. grpc::Server::Shutdown(now + grace_seconds): no new calls,
//                  in-flight calls get until the deadline, then are cancelled,
//               4. stop the metrics server.
//
// RunServiceMain() wraps it for main(): block SIGTERM/SIGINT before any thread
// exists, start, wait for a signal, shut down, return the exit code.
#ifndef KERNELRL_COMMON_SERVICE_H_
#define KERNELRL_COMMON_SERVICE_H_

#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "grpcpp/grpcpp.h"
#include "proto/server_config.pb.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace kernelrl {

using ::kernelrl::v1::ServerConfig;

class ServiceRunner {
 public:
  // `name` labels logs and metrics ("sandbox", "learner", ...). The services
  // must outlive the runner.
  ServiceRunner(std::string name, ServerConfig config, std::vector<grpc::Service*> services,
                MetricsRegistry* metrics = &DefaultRegistry());
  ~ServiceRunner();

  absl::Status Start();
  // The graceful sequence above; idempotent. Returns when the server has stopped.
  void Shutdown();

  // Health as seen by grpc.health.v1 and /healthz (e.g. a sandbox whose GPU
  // health probe failed reports NOT_SERVING while still answering).
  void SetServing(bool serving);
  bool serving() const { return serving_; }

  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }

 private:
  absl::Status WritePortFile() const;
  // Serves /metrics and /healthz on listen_address:metrics_port (0 picks one); returns the port.
  absl::StatusOr<int> StartHttp();

  const std::string name_;
  const ServerConfig config_;
  std::vector<grpc::Service*> services_;
  MetricsRegistry* metrics_;
  std::unique_ptr<grpc::Service> diagnostics_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<httplib::Server> http_;
  std::thread http_thread_;
  std::atomic<bool> serving_{false};
  std::atomic<bool> shut_down_{false};
  int grpc_port_ = 0;
  int metrics_port_ = -1;
};

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread; threads created
// afterwards inherit the mask, so only WaitForTerminationSignal() sees them.
void BlockTerminationSignals();
// Waits for SIGTERM or SIGINT; returns the signal number.
int WaitForTerminationSignal();

// Everything a main() does. `make_services` runs after the config is parsed
// and returns the services to serve (or an error that becomes exit code 1).
// `healthy`, if given, is polled twice a second while serving: health
// (grpc.health.v1 and /healthz) follows it, e.g. NOT_SERVING while a sandbox
// worker's GPU health probe fails. `on_stop`, if given, runs when the stop
// signal arrives, before the graceful sequence: a binary that pulls work
// (an actor leasing tasks) stops pulling there, not after the drain.
// Exit codes: 0 clean shutdown, 1 runtime error, 2 bad configuration.
int RunServiceMain(int argc, char** argv, const std::string& name, const std::string& defaults_text,
                   google::protobuf::Message* config, ServerConfig* server_config,
                   const std::function<absl::StatusOr<std::vector<grpc::Service*>>()>& make_services,
                   const std::function<bool()>& healthy = nullptr,
                   const std::function<void()>& on_stop = nullptr);

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_SERVICE_H_
