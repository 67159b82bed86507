// ShellSession: the agent's persistent bash in its workspace, plus its
// background jobs, all started through sandbox/contain (StartContained).
//
// Isolation (WorkspaceIsolation.contain): user, pid, net (no network: only a
// down loopback), mount, ipc and uts namespaces; the root read-only with only
// the workspace writable; a private size-capped /tmp; the other rollouts'
// directories and configured trusted directories hidden; rlimits; seccomp
// (processes allowed, sockets other than AF_UNIX refused). Each failed step
// is logged by contain; with fail_on_degraded the shell refuses to start.
//
// Contract:
//  * Run() executes one command in the same bash process as the previous
//    ones (cwd and variables carry over), stdin from /dev/null, stderr merged
//    into stdout. A command that outlives its timeout is killed with the whole
//    shell; the next Run() starts a fresh shell in the workspace root (the
//    result says so). `exit` ends the shell the same way.
//  * Output beyond the cap keeps its head and tail, with the elided byte
//    count in between.
//  * Background jobs run in their own contained process; BackgroundOutput()
//    returns what a job wrote since the last call; KillBackground() ends it.
//  * The destructor kills the shell and every job.
// Thread-compatible: one rollout's tools call it from one thread.
#ifndef KERNELRL_ACTOR_SHELL_H_
#define KERNELRL_ACTOR_SHELL_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/actor_config.pb.h"

namespace kernelrl::actor {

struct ShellResult {
  std::string output;   // Capped as described above.
  int exit_code = 0;
  bool timed_out = false;
  bool shell_restarted = false;  // The shell died (timeout or exit) during this call.
};

struct JobOutput {
  std::string output;   // New since the last call (capped).
  bool running = false;
  int exit_code = 0;    // When not running.
};

// Keeps the first and last cap/2 bytes of `text`.
std::string CapOutput(const std::string& text, size_t cap, size_t elided_extra = 0);

class ShellSession {
 public:
  // `workspace` is the writable directory; `control_dir` holds stderr files;
  // `hidden` are directories to hide; the workspace beneath one stays reachable, alone (the
  // rollouts' root: no other rollout is seen).
  ShellSession(std::string workspace, std::string control_dir, std::vector<std::string> hidden,
               v1::WorkspaceIsolation isolation, size_t output_cap);
  ~ShellSession();

  absl::StatusOr<ShellResult> Run(const std::string& command, double timeout_seconds);

  absl::StatusOr<std::string> StartBackground(const std::string& command, int max_jobs);
  absl::StatusOr<JobOutput> BackgroundOutput(const std::string& id);
  absl::Status KillBackground(const std::string& id);

  // Protections contain reported for the current shell (its StepLog).
  const std::string& contain_log() const { return contain_log_; }

 private:
  struct Job;
  absl::Status EnsureShell();
  void KillShell();
  // argv runs contained (or plainly when isolation is off).
  absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, int* stdin_fd, int* stdout_fd);

  const std::string workspace_, control_dir_;
  const std::vector<std::string> hidden_;
  const v1::WorkspaceIsolation isolation_;
  const size_t output_cap_;
  pid_t shell_pid_ = -1;
  int shell_in_ = -1, shell_out_ = -1;
  std::string contain_log_;
  int next_job_ = 1;
  std::map<std::string, std::unique_ptr<Job>> jobs_;
};

}  // namespace kernelrl::actor

#endif  // KERNELRL_ACTOR_SHELL_H_
