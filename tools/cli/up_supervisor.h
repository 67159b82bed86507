// Supervisor: keeps the named processes of `kernelrl up` running on one machine.
//
// Contract:
//  - Start() spawns a child with stdout and stderr appended to its own log file,
//    in its own process group, with a parent-death signal (SIGTERM) so children
//    never outlive a killed supervisor.
//  - A child that exits for any reason but Stop() — a crash, kill -9, exit 1 — is
//    restarted with its current argv (SetArgv() changes it, e.g. to pin the port a
//    restarted server must come back on). Back-off doubles from initial_backoff up
//    to max_backoff and returns to initial_backoff once a run lasted stable_after.
//    After max_quick_failures consecutive runs shorter than stable_after the child
//    is given up (kGaveUp) instead of crash-looping.
//  - Every start, exit, restart and stop is reported once, in order, through the
//    event callback, which runs on the supervisor's thread.
//
// Thread-safety: public methods may be called from any thread; one background
// thread reaps children (waitpid per known pid, every 20 ms) and runs restarts.
#ifndef KERNELRL_TOOLS_CLI_UP_SUPERVISOR_H_
#define KERNELRL_TOOLS_CLI_UP_SUPERVISOR_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kernelrl::up {

struct RestartPolicy {
  absl::Duration initial_backoff = absl::Milliseconds(500);
  absl::Duration max_backoff = absl::Seconds(30);
  absl::Duration stable_after = absl::Seconds(30);
  int max_quick_failures = 8;
};

struct ChildSpec {
  std::string name;               // Unique: "learner", "actor-0", ...
  std::vector<std::string> argv;  // argv[0] is the executable's path.
  std::string log_path;           // stdout + stderr, appended across restarts.
  // "NAME=VALUE" entries over the inherited environment (CUDA_VISIBLE_DEVICES
  // puts a process on its own GPU).
  std::vector<std::string> env;
};

struct SupervisorEvent {
  enum Kind { kStarted, kExited, kRestarting, kStopped, kGaveUp };
  Kind kind;
  std::string name;
  pid_t pid = 0;
  std::string detail;   // kExited: "exit 1" / "signal 9 (Killed)"; kRestarting: "in 1.0s".
  int restarts = 0;     // Restarts so far (kStarted after a restart: >= 1).
  double uptime_s = 0;  // kExited / kStopped: how long that run lasted.
};

struct ChildState {
  pid_t pid = 0;  // 0 while not running.
  int restarts = 0;
  bool running = false;
  bool gave_up = false;
};

class Supervisor {
 public:
  using EventFn = std::function<void(const SupervisorEvent&)>;
  Supervisor(RestartPolicy policy, EventFn on_event);
  ~Supervisor();  // Stops every child (SIGTERM, then SIGKILL after 10 s).

  absl::Status Start(const ChildSpec& spec) ABSL_LOCKS_EXCLUDED(mu_);
  // Used by the next restart of `name`.
  void SetArgv(const std::string& name, std::vector<std::string> argv) ABSL_LOCKS_EXCLUDED(mu_);
  // SIGTERM to every named child at once, then waits for each up to `grace`
  // and SIGKILLs what is left. Stopped children are not restarted. Returns once
  // their kStopped events have reached on_event (so it must not be called from it).
  void Stop(const std::vector<std::string>& names, absl::Duration grace) ABSL_LOCKS_EXCLUDED(mu_);
  // Every child, in reverse start order groups: all at once, same grace.
  void StopAll(absl::Duration grace) ABSL_LOCKS_EXCLUDED(mu_);

  ChildState State(const std::string& name) const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<std::string> Names() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Child {
    ChildSpec spec;
    pid_t pid = 0;
    absl::Time started;
    int restarts = 0;
    int quick_failures = 0;
    absl::Duration backoff;
    absl::Time restart_at = absl::InfiniteFuture();  // When a pending restart is due.
    bool stopping = false;
    bool gave_up = false;
  };

  absl::Status SpawnLocked(Child& child) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  // Reaps exited children and starts due restarts; returns events to report.
  std::vector<SupervisorEvent> TickLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Report(const std::vector<SupervisorEvent>& events) ABSL_LOCKS_EXCLUDED(mu_);

  const RestartPolicy policy_;
  const EventFn on_event_;
  mutable absl::Mutex mu_;
  std::map<std::string, Child> children_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  // A tick's events are on their way to on_event (reaped children's included).
  bool reporting_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex report_mu_;  // Keeps event callbacks in order across threads.
  std::thread thread_;
};

// "exit 3", "signal 9 (Killed)".
std::string DescribeWaitStatus(int status);

// The "name=port" lines the supervised services write to their port files
// (a service started on port 0 says which it got); {} while none is written.
std::map<std::string, int> ReadPorts(const std::string& path);

}  // namespace kernelrl::up

#endif  // KERNELRL_TOOLS_CLI_UP_SUPERVISOR_H_
