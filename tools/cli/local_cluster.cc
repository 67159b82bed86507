#include "tools/cli/local_cluster.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/config.h"
#include "grpcpp/grpcpp.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"

namespace kernelrl::cli {

namespace fs = std::filesystem;

std::string SelfExe() {
  std::error_code ec;
  return fs::read_symlink("/proc/self/exe", ec).string();
}

absl::Status ResolvePaths(const std::string& command, v1::LocalPaths* paths) {
  if (paths->bin_dir().empty()) {
    const fs::path self = SelfExe();
    std::vector<std::string> candidates = {self.string() + ".runfiles/kernelrl",
                                           self.parent_path().parent_path().parent_path().string()};
    if (const char* rf = getenv("RUNFILES_DIR")) candidates.push_back(std::string(rf) + "/kernelrl");
    for (const std::string& c : candidates) {
      if (access((c + "/learner/learner_main").c_str(), X_OK) == 0) {
        paths->set_bin_dir(c);
        break;
      }
    }
    if (paths->bin_dir().empty()) {
      return absl::NotFoundError("service binaries not found (build them, or pass --bin_dir=bazel-bin)");
    }
  }
  if (paths->repo_dir().empty()) {
    std::error_code ec;
    paths->set_repo_dir(fs::current_path(ec).string());
    for (const std::string& c : {paths->bin_dir(), fs::current_path(ec).string()}) {
      if (access((c + "/tools/cli/up_quickstart.py").c_str(), R_OK) == 0) {
        paths->set_repo_dir(c);
        break;
      }
    }
  }
  if (paths->run_dir().empty()) paths->set_run_dir(absl::StrCat("/tmp/kernelrl-", command, "-", getpid()));
  std::error_code ec;
  fs::create_directories(paths->run_dir(), ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--run_dir ", paths->run_dir(), ": ", ec.message()));
  return absl::OkStatus();
}

std::string Health(const std::string& address) {
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::health::v1::HealthCheckResponse response;
  if (!stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &response).ok()) return "UNREACHABLE";
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
}

std::vector<std::string> ServiceArgs(const google::protobuf::Message& config, const std::vector<std::string>& sets,
                                     const std::string& field) {
  std::vector<std::string> args;
  const google::protobuf::FieldDescriptor* f = config.GetDescriptor()->FindFieldByName(field);
  if (f != nullptr && config.GetReflection()->HasField(config, f)) {
    const std::string text = TextProto(config.GetReflection()->GetMessage(config, f));
    if (!text.empty()) args.push_back("--config_text=" + text);
  }
  for (const std::string& s : sets) {
    if (absl::StartsWith(s, field + ".")) args.push_back("--set=" + s.substr(field.size() + 1));
  }
  return args;
}

std::string ServerPorts::Address() const { return absl::StrCat("127.0.0.1:", grpc); }

LocalCluster::LocalCluster(std::string bin_dir, std::string run_dir,
                           std::function<void(const up::SupervisorEvent&)> on_event)
    : bin_dir_(std::move(bin_dir)), run_dir_(std::move(run_dir)), sup_(up::RestartPolicy{}, std::move(on_event)) {}

std::vector<std::string> LocalCluster::Argv(const std::string& name, const std::string& binary,
                                            const ServerPorts& ports, const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {bin_dir_ + "/" + binary, absl::StrCat("--set=server.grpc_port=", ports.grpc),
                                   absl::StrCat("--set=server.metrics_port=", ports.metrics),
                                   absl::StrCat("--set=server.port_file=", run_dir_, "/", name, ".ports"),
                                   // Local: a short drain, so Ctrl-C stops the cluster in seconds.
                                   "--set=server.drain_seconds=0.5", "--set=server.grace_seconds=10"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

absl::StatusOr<ServerPorts> LocalCluster::StartServer(const std::string& name, const std::string& binary,
                                                      const std::vector<std::string>& args, absl::Time deadline,
                                                      const std::vector<std::string>& env) {
  const std::string port_file = absl::StrCat(run_dir_, "/", name, ".ports");
  unlink(port_file.c_str());
  if (absl::Status s =
          sup_.Start({name, Argv(name, binary, ServerPorts{}, args), absl::StrCat(run_dir_, "/", name, ".log"), env});
      !s.ok()) {
    return s;
  }
  while (!sup_.State(name).gave_up && absl::Now() < deadline) {
    std::map<std::string, int> ports = up::ReadPorts(port_file);
    if (ports.count("grpc_port") && ports.count("metrics_port")) {
      const ServerPorts pinned{ports["grpc_port"], ports["metrics_port"]};
      sup_.SetArgv(name, Argv(name, binary, pinned, args));  // A restart comes back on the same ports.
      return pinned;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::UnavailableError(absl::StrCat(name, " did not start listening; see ", run_dir_, "/", name, ".log"));
}

absl::Status LocalCluster::StartProcess(const std::string& name, const std::string& binary,
                                        const std::vector<std::string>& args) {
  return sup_.Start({name, Argv(name, binary, ServerPorts{}, args), absl::StrCat(run_dir_, "/", name, ".log")});
}

bool LocalCluster::WaitServing(const std::string& address, absl::Time deadline) {
  while (Health(address) != "SERVING") {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(200));
  }
  return true;
}

void LocalCluster::Stop(const std::vector<std::string>& names, absl::Duration grace) { sup_.Stop(names, grace); }
void LocalCluster::StopAll(absl::Duration grace) { sup_.StopAll(grace); }

}  // namespace kernelrl::cli
