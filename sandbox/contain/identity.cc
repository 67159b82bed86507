// Identity (phase 2, last step): from here on the process is KrPolicy's
// run_as_uid/gid (nobody, 65534) and holds no capability. Two ways there,
// chosen in phase 1 by HostIdentityAvailable():
//   - the worker is privileged (root with CAP_SETUID, the uid mapped in its
//     user namespace): no new user namespace is made and this step switches
//     to the host uid itself, which drops every capability. The candidate is
//     then the host's nobody: it owns nothing on the host.
//   - otherwise the user namespace maps run_as_uid onto the worker's own uid
//     (the only mapping an unprivileged process may write): the ids are right
//     already and the capabilities of the namespace's creator are dropped
//     explicitly. Inside it reads 65534 either way; on the host it is the
//     worker's uid, which the constructed root leaves nothing of to touch.
#include <grp.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "sandbox/contain/steps.h"

namespace kernelrl::sandbox {
namespace {

// The host uid `uid` of this user namespace maps to ("" when unmapped).
std::string HostUidOf(int uid) {
  FILE* f = std::fopen("/proc/self/uid_map", "r");
  if (f == nullptr) return "";
  long inside, outside, count;
  std::string out;
  while (std::fscanf(f, "%ld %ld %ld", &inside, &outside, &count) == 3) {
    if (uid >= inside && uid < inside + count) out = std::to_string(outside + (uid - inside));
  }
  std::fclose(f);
  return out;
}

bool HasEffectiveCap(int cap) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return false;
  char line[256];
  unsigned long long eff = 0;
  while (std::fgets(line, sizeof(line), f)) {
    if (std::sscanf(line, "CapEff: %llx", &eff) == 1) break;
  }
  std::fclose(f);
  return (eff >> cap) & 1ull;
}

bool DropAllCapabilities() {
  for (int cap = 0; cap < 64; ++cap) prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);  // EINVAL past the last: fine
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  return syscall(SYS_capset, &header, data) == 0;
}

}  // namespace

bool HostIdentityAvailable(int uid) {
  return uid > 0 && geteuid() == 0 && !HostUidOf(uid).empty() && HasEffectiveCap(CAP_SETUID) &&
         HasEffectiveCap(CAP_SETGID);
}

bool AssumeIdentity(const KrPolicy& p, StepLog& log) {
  if (p.run_as_uid <= 0) return true;
  const uid_t uid = p.run_as_uid;
  const gid_t gid = p.run_as_gid > 0 ? p.run_as_gid : p.run_as_uid;
  // Supplementary groups: cleared where allowed (EPERM in a user namespace
  // with setgroups denied: the host's groups are then unmapped there).
  if (setgroups(0, nullptr) != 0 && errno != EPERM) {
    log.Failed("identity", "setgroups(0)", errno, "supplementary groups kept");
  }
  if (setresgid(gid, gid, gid) != 0) {
    log.Failed("identity", "setresgid(" + std::to_string(gid) + ")", errno, "runs with the worker's gid");
    return false;
  }
  if (setresuid(uid, uid, uid) != 0) {
    log.Failed("identity", "setresuid(" + std::to_string(uid) + ")", errno, "runs with the worker's uid");
    return false;
  }
  if (!DropAllCapabilities()) {
    log.Failed("identity", "capset(0)", errno, "capabilities of the user namespace kept");
    return false;
  }
  if (getuid() != uid || geteuid() != uid || getgid() != gid) {
    log.Failed("identity", "getresuid() check", EPERM, "identity not what was asked");
    return false;
  }
  const std::string host = HostUidOf(uid);
  log.Ok("identity (uid " + std::to_string(uid) + " gid " + std::to_string(gid) + ", host uid " +
         (host.empty() ? std::string("?") : host) + ", no capabilities)");
  return true;
}

}  // namespace kernelrl::sandbox
