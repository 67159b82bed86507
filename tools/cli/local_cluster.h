// The one launcher of a cluster on this machine, used by `kernelrl up`,
// `kernelrl learn` and `kernelrl eval`: service processes as supervised
// children (up_supervisor.h: restart on crash with back-off, one log each),
// each on loopback ports the kernel picks and then pinned, so a restarted
// server comes back where its clients look.
//
// Files in the run directory: <name>.log (stdout+stderr across restarts),
// <name>.ports (grpc_port / metrics_port, written by the service).
// Not thread-safe: one thread starts and stops processes (the supervisor's own
// threads restart them).
#ifndef KERNELRL_TOOLS_CLI_LOCAL_CLUSTER_H_
#define KERNELRL_TOOLS_CLI_LOCAL_CLUSTER_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "proto/cli_config.pb.h"
#include "tools/cli/up_supervisor.h"

namespace kernelrl::cli {

// This binary's path.
std::string SelfExe();

// Fills paths' empty fields: bin_dir (this binary's runfiles or the bazel-bin
// tree it sits in; NotFound when neither holds learner/learner_main), repo_dir
// (the runfiles or the working directory: where tools/cli/*.py are), run_dir
// (/tmp/kernelrl-<command>-<pid>, created).
absl::Status ResolvePaths(const std::string& command, v1::LocalPaths* paths);

// The grpc.health.v1 status of the server at `address` ("SERVING", ...,
// "UNREACHABLE").
std::string Health(const std::string& address);

// What the config says for one service (`field`: "learner", "sandbox", ...
// a message field of `config`): --config_text with that field's text when it
// is set, then every --set assignment under it with the prefix stripped.
std::vector<std::string> ServiceArgs(const google::protobuf::Message& config, const std::vector<std::string>& sets,
                                     const std::string& field);

struct ServerPorts {
  int grpc = 0, metrics = 0;
  std::string Address() const;  // "127.0.0.1:<grpc>"
};

class LocalCluster {
 public:
  // on_event sees every supervisor event (start, exit, restart, stop).
  LocalCluster(std::string bin_dir, std::string run_dir, std::function<void(const up::SupervisorEvent&)> on_event);

  // Starts bin_dir/<binary> as `name` with the common server flags (ports the
  // kernel picks, a port file, a short drain) then `args`; waits until its
  // ports are known and pins them for restarts. Unavailable after `deadline`
  // or when the supervisor gives up on it. `env`: ChildSpec::env.
  absl::StatusOr<ServerPorts> StartServer(const std::string& name, const std::string& binary,
                                          const std::vector<std::string>& args, absl::Time deadline,
                                          const std::vector<std::string>& env = {});
  // Starts bin_dir/<binary> as `name` with the same server flags, ports left to
  // the kernel on every start: for a process no other one dials (an actor).
  absl::Status StartProcess(const std::string& name, const std::string& binary, const std::vector<std::string>& args);
  // Waits until the server at `address` is SERVING; false at `deadline`.
  static bool WaitServing(const std::string& address, absl::Time deadline);

  // Stops processes by name (SIGTERM, then SIGKILL after `grace`), in one go.
  void Stop(const std::vector<std::string>& names, absl::Duration grace);
  void StopAll(absl::Duration grace);

  up::Supervisor& supervisor() { return sup_; }
  const std::string& run_dir() const { return run_dir_; }

 private:
  std::vector<std::string> Argv(const std::string& name, const std::string& binary, const ServerPorts& ports,
                                const std::vector<std::string>& args) const;

  const std::string bin_dir_, run_dir_;
  up::Supervisor sup_;
};

}  // namespace kernelrl::cli

#endif  // KERNELRL_TOOLS_CLI_LOCAL_CLUSTER_H_
