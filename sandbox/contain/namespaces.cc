// Namespaces: user first (it grants the capabilities the others need when the
// worker is unprivileged), then pid, net, mount, ipc, uts, each unshared on
// its own so one refusal does not cost the others.
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "sandbox/contain/steps.h"

namespace kernelrl::sandbox {
namespace {

bool WriteFile(const char* path, const std::string& text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = write(fd, text.data(), text.size());
  int saved = errno;
  close(fd);
  errno = saved;
  return n == static_cast<ssize_t>(text.size());
}

}  // namespace

bool EnterUserNamespace(StepLog& log) { return EnterUserNamespace(0, 0, log); }

bool EnterUserNamespace(int inside_uid, int inside_gid, StepLog& log) {
  const uid_t uid = geteuid();
  const gid_t gid = getegid();
  if (unshare(CLONE_NEWUSER) != 0) {
    log.Failed("user_ns", "unshare(CLONE_NEWUSER)", errno,
               "no user namespace: later namespaces need real privileges");
    return false;
  }
  // setgroups must be denied before an unprivileged gid_map write.
  WriteFile("/proc/self/setgroups", "deny");
  if (!WriteFile("/proc/self/uid_map", std::to_string(inside_uid) + " " + std::to_string(uid) + " 1\n")) {
    log.Failed("user_ns", "write(/proc/self/uid_map)", errno, "uid unmapped inside");
    return false;
  }
  if (!WriteFile("/proc/self/gid_map", std::to_string(inside_gid) + " " + std::to_string(gid) + " 1\n")) {
    log.Failed("user_ns", "write(/proc/self/gid_map)", errno, "gid unmapped inside");
    return false;
  }
  log.Ok(inside_uid == 0 ? std::string("user_ns")
                         : "user_ns (uid " + std::to_string(inside_uid) + " inside = host uid " + std::to_string(uid) + ")");
  return true;
}

bool EnterNamespaces(const KrPolicy& p, StepLog& log) {
  struct Ns {
    int wanted;
    int flag;
    const char* call;
    const char* name;
    const char* consequence;
  };
  const Ns all[] = {
      {p.pid_ns, CLONE_NEWPID, "unshare(CLONE_NEWPID)", "pid_ns", "candidate can see and signal host processes"},
      {p.net_ns, CLONE_NEWNET, "unshare(CLONE_NEWNET)", "net_ns", "network reachable; only seccomp blocks sockets"},
      {p.mount_ns, CLONE_NEWNS, "unshare(CLONE_NEWNS)", "mount_ns", "no read-only view, no scratch tmpfs"},
      {p.ipc_ns, CLONE_NEWIPC, "unshare(CLONE_NEWIPC)", "ipc_ns", "SysV IPC shared with the host"},
      {p.uts_ns, CLONE_NEWUTS, "unshare(CLONE_NEWUTS)", "uts_ns", "hostname shared"},
  };
  bool all_ok = true;
  for (const Ns& ns : all) {
    if (!ns.wanted) continue;
    if (unshare(ns.flag) != 0) {
      log.Failed(ns.name, ns.call, errno, ns.consequence);
      all_ok = false;
    } else {
      log.Ok(ns.name);
    }
  }
  return all_ok;
}

}  // namespace kernelrl::sandbox
