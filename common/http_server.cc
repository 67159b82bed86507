#include "common/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_util.h"

namespace kernelrl {

namespace {
constexpr int kReadTimeoutMs = 2000;
constexpr size_t kMaxRequestBytes = 8192;

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return;  // Client went away: nothing to do for a scrape.
    }
    done += static_cast<size_t>(n);
  }
}

std::string Response(int code, const char* reason, const std::string& content_type, const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}
}  // namespace

MetricsHttpServer::MetricsHttpServer(std::function<std::string()> expose, std::function<bool()> healthy)
    : expose_(std::move(expose)), healthy_(std::move(healthy)) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

absl::StatusOr<int> MetricsHttpServer::Start(const std::string& address, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("metrics listen address '", address, "' is not an IPv4 address"));
  }
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return ErrnoToStatus(errno, "socket");
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    ::close(listen_fd_);
    listen_fd_ = -1;
    return ErrnoToStatus(err, absl::StrCat("bind metrics port ", address, ":", port));
  }
  if (::listen(listen_fd_, 64) != 0) return ErrnoToStatus(errno, "listen");
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  if (::pipe2(wake_fd_, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe2");
  thread_ = std::thread([this] { Serve(); });
  return static_cast<int>(ntohs(addr.sin_port));
}

void MetricsHttpServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (thread_.joinable()) {
    const char byte = 'x';
    ssize_t ignored = ::write(wake_fd_[1], &byte, 1);
    (void)ignored;
    thread_.join();
  }
  for (int* fd : {&listen_fd_, &wake_fd_[0], &wake_fd_[1]}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void MetricsHttpServer::Serve() {
  while (!stopping_) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
    const int ready = ::poll(fds, 2, -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      KLOG(ERROR) << "metrics server poll: " << std::strerror(errno);
      return;
    }
    if (fds[1].revents) return;
    if (!(fds[0].revents & POLLIN)) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    HandleConnection(fd);
    ::close(fd);
  }
}

void MetricsHttpServer::HandleConnection(int fd) {
  std::string request;
  char buf[1024];
  while (request.find("\r\n\r\n") == std::string::npos && request.find("\n\n") == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, kReadTimeoutMs) <= 0) return;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return;
    request.append(buf, static_cast<size_t>(n));
    if (request.size() > kMaxRequestBytes) {
      WriteAll(fd, Response(431, "Request Header Fields Too Large", "text/plain", "request too large\n"));
      return;
    }
  }
  const size_t line_end = request.find_first_of("\r\n");
  const std::string line = request.substr(0, line_end);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = line.find(' ', sp1 + 1);
  const std::string method = line.substr(0, sp1);
  std::string path = sp1 == std::string::npos ? "" : line.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  if (method != "GET" && method != "HEAD") {
    WriteAll(fd, Response(405, "Method Not Allowed", "text/plain", "only GET\n"));
  } else if (path == "/metrics") {
    WriteAll(fd, Response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", expose_()));
  } else if (path == "/healthz") {
    const bool ok = healthy_();
    WriteAll(fd, ok ? Response(200, "OK", "text/plain", "ok\n")
                    : Response(503, "Service Unavailable", "text/plain", "not serving\n"));
  } else {
    WriteAll(fd, Response(404, "Not Found", "text/plain", "try /metrics or /healthz\n"));
  }
}

}  // namespace kernelrl
