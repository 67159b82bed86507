// Supervise(): the wall-clock watchdog. Kills the whole process group (and,
// when the child is pid 1 of its own pid namespace, the kernel then kills
// every process in that namespace).
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include "common/clock.h"
#include "sandbox/contain/contain.h"

namespace kernelrl::sandbox {
namespace {


void Fill(SuperviseResult& r, int status, const struct rusage& ru) {
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.term_signal = WTERMSIG(status);
  r.cpu_ms = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
             (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
  r.max_rss_kb = ru.ru_maxrss;
}

}  // namespace

SuperviseResult Supervise(pid_t pid, double wall_seconds) {
  SuperviseResult r;
  const double start = MonotonicMs();
  const double deadline = start + wall_seconds * 1e3;
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
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      got = wait4(pid, &status, 0, &ru);
      if (got == pid) Fill(r, status, ru);
      break;
    }
    const int wait_ms = static_cast<int>(deadline - now) + 1;
    if (pidfd >= 0) {
      struct pollfd pfd = {pidfd, POLLIN, 0};
      poll(&pfd, 1, wait_ms);
    } else {
      usleep(2000);
    }
  }
  // Stragglers that left the group's leader behind still die with the group.
  kill(-pid, SIGKILL);
  if (pidfd >= 0) close(pidfd);
  r.wall_ms = MonotonicMs() - start;
  return r;
}

}  // namespace kernelrl::sandbox
