// The isolation sequence of a contained process, in the order it must run.
// Read top to bottom, this is the whole sandbox (docs/SANDBOX.md explains it):
//
//   phase 1  (the process that will supervise; before the pid-1 fork)
//     1. parent-death signal, 2. own process group, 3. user namespace,
//     4. pid / net / mount / ipc / uts namespaces
//   --- fork: the child is pid 1 of the new pid namespace ---
//   phase 2  (the contained child)
//     5. parent-death signal again (its parent is now the supervisor),
//     6. mounts: private table, writable holes, scratch tmpfs, hidden trusted
//        dirs, fresh /proc, everything else read-only,
//     7. rlimits, 8. close inherited fds
//   phase 3  (right before untrusted code runs: after exec setup or after the
//             harness initialised CUDA, which needs syscalls we then forbid)
//     9. no_new_privs, 10. seccomp
//
// Each step logs its failure and the protection lost; the caller decides from
// the failure count and the host capability probe whether to proceed.
#ifndef KERNELRL_SANDBOX_CONTAIN_CONTAIN_H_
#define KERNELRL_SANDBOX_CONTAIN_CONTAIN_H_

#include <sys/types.h>

#include "sandbox/contain/policy.h"
#include "sandbox/contain/step_log.h"

namespace kernelrl::sandbox {

bool ContainPhaseNamespaces(const KrPolicy& p, StepLog& log);
bool ContainPhaseChild(const KrPolicy& p, StepLog& log);
bool ContainPhaseSeccomp(const KrPolicy& p, StepLog& log);

// What this host allows (KrCapability bits), probed in a throwaway child.
int ProbeHostCapabilities();
// Human-readable list of the capabilities missing from `caps`.
std::string DescribeMissingCapabilities(int caps);

// The watchdog: waits for `pid` up to `wall_seconds`, then SIGKILLs its
// process group and the process itself. Never returns before `pid` is reaped.
// With a memory cap it also samples the resident host memory of `pid` and all
// its descendants (host_memory.h) every `memory_poll_ms` and kills the group
// the first time the sum exceeds the cap: a host-memory hog gets a memory
// verdict in the time it takes to touch the cap, instead of a TIMEOUT after
// filling RLIMIT_DATA at first-touch speed.
struct SuperviseOptions {
  double wall_seconds = 60;
  long long memory_cap_bytes = 0;  // 0 = no cap
  double memory_poll_ms = 10;
  int proc_fd = -1;  // procfs opened before the fork (see host_memory.h); -1 = "/proc"
};
struct SuperviseResult {
  int exit_code = -1;    // WEXITSTATUS when exited normally
  int term_signal = 0;   // WTERMSIG when killed by a signal
  bool timed_out = false;
  bool memory_exceeded = false;  // killed by the memory cap (term_signal is then SIGKILL)
  long long memory_at_kill_bytes = 0;
  long long peak_memory_bytes = 0;  // largest sample (0 without a cap)
  int memory_samples = 0;
  double wall_ms = 0;
  double cpu_ms = 0;     // user + system of the child and its reaped children
  long max_rss_kb = 0;
};
SuperviseResult Supervise(pid_t pid, const SuperviseOptions& options);
SuperviseResult Supervise(pid_t pid, double wall_seconds);

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_CONTAIN_CONTAIN_H_
