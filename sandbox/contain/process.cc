// Process-level steps: die with the parent, own process group (the watchdog
// kills the group), and no privilege gain through exec (needed for seccomp).
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "sandbox/contain/steps.h"

namespace kernelrl::sandbox {

bool SetParentDeathSignal(int sig, StepLog& log, const char* step) {
  if (sig == 0) return true;
  if (prctl(PR_SET_PDEATHSIG, sig) != 0) {
    log.Failed(step, "prctl(PR_SET_PDEATHSIG)", errno, "process survives its supervisor");
    return false;
  }
  log.Ok(step);
  return true;
}

bool EnterNewProcessGroup(StepLog& log) {
  if (setpgid(0, 0) != 0) {
    log.Failed("process_group", "setpgid(0, 0)", errno, "watchdog kills only the direct child");
    return false;
  }
  log.Ok("process_group");
  return true;
}

bool SetNoNewPrivs(StepLog& log) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    log.Failed("no_new_privs", "prctl(PR_SET_NO_NEW_PRIVS)", errno, "seccomp cannot be installed unprivileged");
    return false;
  }
  log.Ok("no_new_privs");
  return true;
}

}  // namespace kernelrl::sandbox
