#include "common/service.h"

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/config.h"
#include "common/diagnostics_service.h"
#include "common/grpc_metrics.h"
#include "common/http_listen.h"
#include "common/log.h"
#include "common/status_util.h"
#include "grpcpp/health_check_service_interface.h"
#include "httplib.h"

namespace kernelrl {

ServiceRunner::ServiceRunner(std::string name, ServerConfig config, std::vector<grpc::Service*> services,
                             MetricsRegistry* metrics)
    : name_(std::move(name)), config_(std::move(config)), services_(std::move(services)), metrics_(metrics) {}

ServiceRunner::~ServiceRunner() { Shutdown(); }

absl::Status ServiceRunner::Start() {
  metrics_->set_max_series_per_family(config_.metrics_max_series() > 0 ? config_.metrics_max_series() : 1000);
  metrics_->AddGauge("kernelrl_build_info", "Always 1; labels identify the binary.", {"service"})
      .Labels({name_})
      .Set(1);
  Gauge& up = metrics_->AddGauge("kernelrl_serving", "1 while health reports SERVING.", {"service"}).Labels({name_});
  Gauge& uptime =
      metrics_->AddGauge("kernelrl_uptime_seconds", "Seconds since the service started.", {"service"}).Labels({name_});
  const absl::Time started = absl::Now();
  metrics_->AddCollectHook([this, &up, &uptime, started] {
    up.Set(serving_ ? 1 : 0);
    uptime.Set(absl::ToDoubleSeconds(absl::Now() - started));
  });

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(config_.listen_address(), ":", config_.grpc_port());
  // No SO_REUSEPORT: a second server on a taken port must fail, not split traffic.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &grpc_port_);
  for (grpc::Service* service : services_) builder.RegisterService(service);
  if (!config_.disable_diagnostics()) {
    diagnostics_ = std::make_unique<DiagnosticsService>(name_);
    builder.RegisterService(diagnostics_.get());
  }
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(MakeGrpcMetricsInterceptorFactory(name_, metrics_));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || grpc_port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for gRPC on ", address,
                                               " (port in use, or address not local)"));
  }
  if (config_.metrics_port() >= 0) {
    absl::StatusOr<int> port = StartHttp();
    if (!port.ok()) {
      server_->Shutdown(std::chrono::system_clock::now());
      return port.status();
    }
    metrics_port_ = *port;
  }
  SetServing(true);
  KR_RETURN_IF_ERROR(WritePortFile());
  KLOG(INFO) << name_ << " serving gRPC on " << config_.listen_address() << ":" << grpc_port_
             << ", metrics on " << (metrics_port_ >= 0 ? absl::StrCat(metrics_port_) : "(disabled)");
  return absl::OkStatus();
}

absl::StatusOr<int> ServiceRunner::StartHttp() {
  http_ = std::make_unique<httplib::Server>();
  // httplib's default adds SO_REUSEPORT, which would let a second process share
  // a metrics port silently; a port in use must be a start error instead.
  http_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_->Expose(), "text/plain; version=0.0.4; charset=utf-8");
  });
  http_->Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    res.status = serving() ? 200 : 503;
    res.set_content(serving() ? "ok\n" : "not serving\n", "text/plain");
  });
  const std::string& host = config_.listen_address();
  int port = config_.metrics_port();
  if (port == 0) {
    port = http_->bind_to_any_port(host);
  } else if (!http_->bind_to_port(host, port)) {
    port = -1;
  }
  if (port <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve /metrics on ", host, ":", config_.metrics_port(), " (port in use, or address not local)"));
  }
  absl::StatusOr<std::thread> loop = ListenInBackground(http_.get());
  if (!loop.ok()) return loop.status();
  http_thread_ = std::move(*loop);
  return port;
}

void ServiceRunner::SetServing(bool serving) {
  serving_ = serving;
  if (server_ != nullptr) server_->GetHealthCheckService()->SetServingStatus(serving);
}

absl::Status ServiceRunner::WritePortFile() const {
  if (config_.port_file().empty()) return absl::OkStatus();
  const std::string tmp = config_.port_file() + ".tmp";
  {
    std::ofstream out(tmp);
    out << "grpc_port=" << grpc_port_ << "\nmetrics_port=" << metrics_port_ << "\n";
    if (!out) return ErrnoToStatus(errno, absl::StrCat("write port file ", tmp));
  }
  // Rename is atomic: readers never see a half-written file.
  if (std::rename(tmp.c_str(), config_.port_file().c_str()) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("rename ", tmp, " to ", config_.port_file()));
  }
  return absl::OkStatus();
}

void ServiceRunner::Shutdown() {
  if (server_ == nullptr || shut_down_.exchange(true)) return;
  KLOG(INFO) << name_ << ": NOT_SERVING; draining for " << config_.drain_seconds() << " s";
  SetServing(false);
  absl::SleepFor(absl::Seconds(config_.drain_seconds()));
  KLOG(INFO) << name_ << ": closing; in-flight calls have " << config_.grace_seconds() << " s";
  const auto deadline = std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(config_.grace_seconds() * 1000));
  server_->Shutdown(deadline);
  server_->Wait();
  if (http_ != nullptr) {
    http_->stop();
    if (http_thread_.joinable()) http_thread_.join();
  }
  KLOG(INFO) << name_ << ": stopped";
}

void BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForTerminationSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int signal_number = 0;
  while (sigwait(&set, &signal_number) != 0) {
  }
  return signal_number;
}

int RunServiceMain(int argc, char** argv, const std::string& name, const std::string& defaults_text,
                   google::protobuf::Message* config, ServerConfig* server_config,
                   const std::function<absl::StatusOr<std::vector<grpc::Service*>>()>& make_services,
                   const std::function<bool()>& healthy, const std::function<void()>& on_stop) {
  BlockTerminationSignals();
  absl::StatusOr<ConfigRequest> request = LoadConfig(argc, argv, defaults_text, config);
  absl::Status valid = request.ok() ? ValidateServerConfig(server_config) : request.status();
  if (!valid.ok()) {
    KLOG(ERROR) << name << ": bad configuration: " << valid.message();
    return 2;
  }
  if (request->help) {
    std::cout << ConfigUsage(argv[0], config->GetDescriptor()->full_name());
    return 0;
  }
  if (request->print_config) {
    std::cout << config->DebugString();
    return 0;
  }
  LogLevel level;
  ParseLogLevel(server_config->log_level(), &level);
  SetMinLogLevel(level);

  absl::StatusOr<std::vector<grpc::Service*>> services = make_services();
  if (!services.ok()) {
    KLOG(ERROR) << name << ": " << services.status().message();
    return 1;
  }
  ServiceRunner runner(name, *server_config, *services);
  if (absl::Status started = runner.Start(); !started.ok()) {
    KLOG(ERROR) << name << ": cannot start: " << started.message();
    return 1;
  }
  std::atomic<bool> stop{false};
  std::thread health_poll;
  if (healthy) {
    health_poll = std::thread([&] {
      while (!stop.load()) {
        const bool ok = healthy();
        if (ok != runner.serving()) {
          KLOG(WARNING) << name << ": health now " << (ok ? "SERVING" : "NOT_SERVING");
          runner.SetServing(ok);
        }
        absl::SleepFor(absl::Milliseconds(500));
      }
    });
  }
  const int signal_number = WaitForTerminationSignal();
  KLOG(INFO) << name << ": received signal " << signal_number;
  if (on_stop) on_stop();
  stop.store(true);
  if (health_poll.joinable()) health_poll.join();  // Before the drain sets NOT_SERVING for good.
  runner.Shutdown();
  return 0;
}

}  // namespace kernelrl
