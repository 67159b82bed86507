// A minimal HTTP/1.0-style server for operational endpoints: GET /metrics
// (Prometheus text exposition) and GET /healthz (200 "ok" / 503 "not serving").
//
// One acceptor thread; each connection is read with a timeout, answered and
// closed, so a slow or hostile client can hold the server for at most the
// read timeout. It serves scrapes, not traffic.
#ifndef KERNELRL_COMMON_HTTP_SERVER_H_
#define KERNELRL_COMMON_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace kernelrl {

class MetricsHttpServer {
 public:
  // `expose` returns the /metrics body; `healthy` decides /healthz.
  MetricsHttpServer(std::function<std::string()> expose, std::function<bool()> healthy);
  ~MetricsHttpServer();  // Stops if still running.

  // Binds address:port (port 0 picks one) and starts serving. Returns the port.
  absl::StatusOr<int> Start(const std::string& address, int port);
  void Stop();

 private:
  void Serve();
  void HandleConnection(int fd);

  std::function<std::string()> expose_;
  std::function<bool()> healthy_;
  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};  // Self-pipe: Stop() writes to end the poll loop.
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_HTTP_SERVER_H_
