#include "common/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>

#include "common/metrics.h"
#include "gtest/gtest.h"

namespace kernelrl {
namespace {

// A raw HTTP GET over loopback; returns the whole response.
std::string Get(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return "connect failed";
  ::send(fd, request.data(), request.size(), 0);
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) response.append(buf, n);
  ::close(fd);
  return response;
}

TEST(MetricsHttpServerTest, ServesMetricsHealthAndErrors) {
  MetricsRegistry registry;
  registry.AddCounter("kr_served_total", "Served.").Get().Increment(42);
  std::atomic<bool> healthy{true};
  MetricsHttpServer server([&] { return registry.Expose(); }, [&] { return healthy.load(); });
  absl::StatusOr<int> port = server.Start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_GT(*port, 0);

  const std::string metrics = Get(*port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(metrics.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << metrics;
  EXPECT_NE(metrics.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(metrics.find("kr_served_total 42\n"), std::string::npos);

  EXPECT_EQ(Get(*port, "GET /healthz HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
  healthy = false;
  EXPECT_EQ(Get(*port, "GET /healthz HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 503", 0), 0u);
  EXPECT_EQ(Get(*port, "GET /nope HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Get(*port, "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_EQ(Get(*port, std::string(9000, 'A')).rfind("HTTP/1.1 431", 0), 0u);
  server.Stop();
  EXPECT_EQ(Get(*port, "GET /metrics HTTP/1.1\r\n\r\n"), "connect failed");
}

TEST(MetricsHttpServerTest, PortInUseIsAClearError) {
  MetricsHttpServer first([] { return ""; }, [] { return true; });
  absl::StatusOr<int> port = first.Start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  MetricsHttpServer second([] { return ""; }, [] { return true; });
  absl::StatusOr<int> clash = second.Start("127.0.0.1", *port);
  ASSERT_FALSE(clash.ok());
  EXPECT_NE(clash.status().message().find("bind metrics port"), std::string::npos) << clash.status();
  EXPECT_FALSE(second.Start("not-an-ip", 0).ok());
}

}  // namespace
}  // namespace kernelrl
