// Supervise(): the wall-clock and host-memory watchdog. Kills the whole
// process group (and, when the child is pid 1 of its own pid namespace, the
// kernel then kills every process in that namespace).
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/clock.h"
#include "sandbox/contain/contain.h"
#include "sandbox/contain/host_memory.h"

namespace kernelrl::sandbox {
namespace {

void Fill(SuperviseResult& r, int status, const struct rusage& ru) {
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.term_signal = WTERMSIG(status);
  r.cpu_ms = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
             (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
  r.max_rss_kb = ru.ru_maxrss;
}

void KillGroup(pid_t pid, SuperviseResult& r) {
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
  int status = 0;
  struct rusage ru = {};
  if (wait4(pid, &status, 0, &ru) == pid) Fill(r, status, ru);
}

}  // namespace

SuperviseResult Supervise(pid_t pid, double wall_seconds) {
  SuperviseOptions o;
  o.wall_seconds = wall_seconds;
  return Supervise(pid, o);
}

SuperviseResult Supervise(pid_t pid, const SuperviseOptions& opt) {
  SuperviseResult r;
  const double start = MonotonicMs();
  const double deadline = start + opt.wall_seconds * 1e3;
  const bool capped = opt.memory_cap_bytes > 0;
  const double poll_ms = opt.memory_poll_ms > 0 ? opt.memory_poll_ms : 10;
  // pidfd makes the wait exact; without it (old kernels) we poll every 2 ms.
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  for (;;) {
    int status = 0;
    struct rusage ru = {};
    pid_t got = wait4(pid, &status, WNOHANG, &ru);
    if (got == pid) {
      Fill(r, status, ru);
      break;
    }
    if (got < 0 && errno != EINTR) break;  // not our child / already reaped
    const double now = MonotonicMs();
    if (now >= deadline) {
      r.timed_out = true;
      KillGroup(pid, r);
      break;
    }
    if (capped) {
      const long long bytes = TreeHostMemoryBytes(pid, opt.proc_fd);
      ++r.memory_samples;
      if (bytes > r.peak_memory_bytes) r.peak_memory_bytes = bytes;
      if (bytes > opt.memory_cap_bytes) {
        r.memory_exceeded = true;
        r.memory_at_kill_bytes = bytes;
        KillGroup(pid, r);
        break;
      }
    }
    int wait_ms = static_cast<int>(deadline - now) + 1;
    if (capped && wait_ms > poll_ms) wait_ms = std::max(1, static_cast<int>(poll_ms));
    if (pidfd >= 0) {
      struct pollfd pfd = {pidfd, POLLIN, 0};
      poll(&pfd, 1, wait_ms);
    } else {
      usleep(static_cast<useconds_t>(std::min(2000, wait_ms * 1000)));
    }
  }
  // Stragglers that left the group's leader behind still die with the group.
  kill(-pid, SIGKILL);
  if (pidfd >= 0) close(pidfd);
  r.wall_ms = MonotonicMs() - start;
  return r;
}

}  // namespace kernelrl::sandbox
