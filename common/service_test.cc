// ServiceRunner's HTTP side: /metrics (the registry's exposition, with the
// runner's own series) and /healthz (following SetServing) on the port the
// port file names; a metrics port already in use is a clear start error.
#include "common/service.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/testing/testing.h"
#include "gtest/gtest.h"

namespace kernelrl {
namespace {

// A raw HTTP GET over loopback; returns the whole response.
std::string Get(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "connect failed";
  }
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ::send(fd, request.data(), request.size(), 0);
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) response.append(buf, n);
  ::close(fd);
  return response;
}

ServerConfig Config(const std::string& port_file) {
  ServerConfig c;
  c.set_listen_address("127.0.0.1");
  c.set_grpc_port(0);
  c.set_metrics_port(0);
  c.set_port_file(port_file);
  c.set_drain_seconds(0);
  c.set_grace_seconds(1);
  return c;
}

TEST(ServiceRunnerTest, ServesMetricsOnThePortFilePort) {
  MetricsRegistry registry;
  const int served = 1 + static_cast<int>(std::random_device{}() % 1000);
  registry.AddCounter("kr_served_total", "Served.").Get().Increment(served);
  const std::string port_file = ::kernelrl::testing::NewTempDir("service_test_") + "/ports";
  ServiceRunner runner("fixture", Config(port_file), {}, &registry);
  ASSERT_TRUE(runner.Start().ok());
  ASSERT_GT(runner.metrics_port(), 0);
  auto ports = ReadFileToString(port_file);
  ASSERT_TRUE(ports.ok());
  EXPECT_NE(ports->find(absl::StrCat("metrics_port=", runner.metrics_port())), std::string::npos) << *ports;

  const std::string metrics = Get(runner.metrics_port(), "/metrics");
  EXPECT_EQ(metrics.rfind("HTTP/1.1 200", 0), 0u) << metrics;
  EXPECT_NE(metrics.find("Content-Type: text/plain"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find(absl::StrCat("kr_served_total ", served, "\n")), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("kernelrl_serving{service=\"fixture\"} 1\n"), std::string::npos) << metrics;
  EXPECT_EQ(Get(runner.metrics_port(), "/nope").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Get(runner.metrics_port(), "/healthz").rfind("HTTP/1.1 200", 0), 0u);
  runner.SetServing(false);
  EXPECT_EQ(Get(runner.metrics_port(), "/healthz").rfind("HTTP/1.1 503", 0), 0u);
  EXPECT_NE(Get(runner.metrics_port(), "/metrics").find("kernelrl_serving{service=\"fixture\"} 0\n"), std::string::npos);
  runner.Shutdown();
  EXPECT_EQ(Get(runner.metrics_port(), "/metrics"), "connect failed");
}

TEST(ServiceRunnerTest, MetricsPortInUseIsAClearError) {
  MetricsRegistry registry;
  const std::string dir = ::kernelrl::testing::NewTempDir("service_test_");
  ServiceRunner first("first", Config(dir + "/first.ports"), {}, &registry);
  ASSERT_TRUE(first.Start().ok());
  ServerConfig clash = Config(dir + "/second.ports");
  clash.set_metrics_port(first.metrics_port());
  MetricsRegistry other;
  ServiceRunner second("second", clash, {}, &other);
  const absl::Status s = second.Start();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot serve /metrics"), std::string::npos) << s;
  first.Shutdown();
}

}  // namespace
}  // namespace kernelrl
