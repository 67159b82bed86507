// Host capability probe: a throwaway child tries each isolation primitive and
// reports which worked, so the worker can log exactly what degrades instead
// of discovering it per candidate.
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include <string>

#include "sandbox/contain/contain.h"
#include "sandbox/contain/steps.h"

namespace kernelrl::sandbox {
namespace {

// A tmpfs root pivoted into, in a grandchild (the pivot would change this
// probe's own root for the steps after it).
bool ProbeRootPivot(const char* dir) {
  pid_t child = fork();
  if (child == 0) {
    // Its own mount table: a pivot changes the root of every process sharing it.
    int ok = unshare(CLONE_NEWNS) == 0 && mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
             mount("tmpfs", dir, "tmpfs", 0, "size=64k") == 0 && chdir(dir) == 0 &&
             syscall(SYS_pivot_root, ".", ".") == 0 && umount2(".", MNT_DETACH) == 0 && chdir("/") == 0;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  return child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// The worker can make the sandbox identity a host uid of its own (root).
bool ProbeHostIdentity() {
  if (!HostIdentityAvailable(65534)) return false;
  pid_t child = fork();
  if (child == 0) _exit(setresgid(65534, 65534, 65534) == 0 && setresuid(65534, 65534, 65534) == 0 ? 0 : 1);
  int status = 0;
  return child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int ProbeInChild() {
  int caps = 0;
  StepLog log;
  if (ProbeHostIdentity()) caps |= KR_CAP_HOST_IDENTITY;
  if (EnterUserNamespace(log)) caps |= KR_CAP_USER_NS;
  if (unshare(CLONE_NEWNET) == 0) caps |= KR_CAP_NET_NS;
  if (unshare(CLONE_NEWIPC) == 0) caps |= KR_CAP_IPC_NS;
  if (unshare(CLONE_NEWUTS) == 0) caps |= KR_CAP_UTS_NS;
  if (unshare(CLONE_NEWNS) == 0) {
    caps |= KR_CAP_MOUNT_NS;
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0) {
      char dir[] = "/tmp/kernelrl-probe-XXXXXX";
      if (mkdtemp(dir) != nullptr) {
        if (mount("tmpfs", dir, "tmpfs", 0, "size=4k") == 0) {
          caps |= KR_CAP_TMPFS;
          // Read-only over the probe's own tmpfs only: nothing else changes.
          if (mount(nullptr, dir, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) == 0) {
            caps |= KR_CAP_RO_REMOUNT;
          }
          umount2(dir, MNT_DETACH);
          if (ProbeRootPivot(dir)) caps |= KR_CAP_PIVOT_ROOT;
        }
        rmdir(dir);
      }
    }
  }
  if (unshare(CLONE_NEWPID) == 0) {
    caps |= KR_CAP_PID_NS;
    pid_t child = fork();
    if (child == 0) {
      int ok = (caps & KR_CAP_MOUNT_NS) &&
               mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) == 0;
      _exit(ok ? 0 : 1);
    }
    int status = 0;
    if (child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
        WEXITSTATUS(status) == 0) {
      caps |= KR_CAP_PROC_MOUNT;
    }
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0) {
    struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_fprog prog = {1, &allow};
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0) caps |= KR_CAP_SECCOMP;
  }
  return caps;
}

}  // namespace

int ProbeHostCapabilities() {
  int fds[2];
  if (pipe(fds) != 0) return 0;
  pid_t pid = fork();
  if (pid < 0) return 0;
  if (pid == 0) {
    close(fds[0]);
    int caps = ProbeInChild();
    (void)!write(fds[1], &caps, sizeof(caps));
    _exit(0);
  }
  close(fds[1]);
  int caps = 0;
  if (read(fds[0], &caps, sizeof(caps)) != sizeof(caps)) caps = 0;
  close(fds[0]);
  int status;
  waitpid(pid, &status, 0);
  return caps;
}

std::string DescribeMissingCapabilities(int caps) {
  struct Cap {
    int bit;
    const char* text;
  };
  const Cap all[] = {
      {KR_CAP_USER_NS, "user_ns (unprivileged namespaces off)"},
      {KR_CAP_PID_NS, "pid_ns (candidate sees host pids)"},
      {KR_CAP_NET_NS, "net_ns (only seccomp blocks network)"},
      {KR_CAP_MOUNT_NS, "mount_ns (no read-only view, no scratch tmpfs)"},
      {KR_CAP_IPC_NS, "ipc_ns"},
      {KR_CAP_TMPFS, "tmpfs (scratch not size-capped)"},
      {KR_CAP_RO_REMOUNT, "ro_remount (filesystem stays writable)"},
      {KR_CAP_PROC_MOUNT, "proc_mount (host /proc visible)"},
      {KR_CAP_SECCOMP, "seccomp (no syscall filter)"},
      {KR_CAP_PIVOT_ROOT, "new_root (no pivot_root into a constructed root: the host filesystem stays visible, "
                          "read-only)"},
      {KR_CAP_HOST_IDENTITY, "identity (worker not root: the candidate runs as the worker's host uid, 65534 "
                             "inside)"},
  };
  std::string out;
  for (const Cap& c : all) {
    if (!(caps & c.bit)) out += std::string(out.empty() ? "" : ", ") + c.text;
  }
  return out;
}

}  // namespace kernelrl::sandbox
