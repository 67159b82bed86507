#include "sandbox/contain/roles.h"

#include <signal.h>

#include <cstring>

namespace kernelrl::sandbox {
namespace {

struct StepRow {
  const char* name;
  int bit;
  int needs_all;  // KrCapability bits that must all be present
  int needs_any;  // ... and one of these (0: none)
};

// What each step needs of the host. data_limit is an rlimit, which every
// host allows; the identity needs a uid to switch to (a host uid other than
// ours, or a user namespace that maps one).
constexpr StepRow kSteps[] = {
    {"user_ns", KR_STEP_USER_NS, KR_CAP_USER_NS, 0},
    {"pid_ns", KR_STEP_PID_NS, KR_CAP_PID_NS, 0},
    {"net_ns", KR_STEP_NET_NS, KR_CAP_NET_NS, 0},
    {"mount_ns", KR_STEP_MOUNT_NS, KR_CAP_MOUNT_NS, 0},
    {"ipc_ns", KR_STEP_IPC_NS, KR_CAP_IPC_NS, 0},
    {"readonly_root", KR_STEP_READONLY_ROOT, KR_CAP_RO_REMOUNT, 0},
    {"mount_proc", KR_STEP_MOUNT_PROC, KR_CAP_PROC_MOUNT, 0},
    {"seccomp", KR_STEP_SECCOMP, KR_CAP_SECCOMP, 0},
    {"data_limit", KR_STEP_DATA_LIMIT, 0, 0},
    {"new_root", KR_STEP_NEW_ROOT, KR_CAP_PIVOT_ROOT, 0},
    {"identity", KR_STEP_IDENTITY, 0, KR_CAP_HOST_IDENTITY | KR_CAP_USER_NS},
};

const StepRow* Find(const std::string& step) {
  for (const StepRow& row : kSteps) {
    if (step == row.name) return &row;
  }
  return nullptr;
}

bool RowAllowed(const StepRow& row, int caps) {
  return (caps & row.needs_all) == row.needs_all && (row.needs_any == 0 || (caps & row.needs_any) != 0);
}

// The steps of `wanted` the host allows.
int Allowed(int wanted, int caps) {
  int out = 0;
  for (const StepRow& row : kSteps) {
    if ((wanted & row.bit) && RowAllowed(row, caps)) out |= row.bit;
  }
  return out;
}

constexpr int kAllSteps = (KR_STEP_IDENTITY << 1) - 1;

// In KrCapability bit order (policy.h).
constexpr const char* kCapabilityNames[] = {"user_ns",    "pid_ns",  "net_ns",     "mount_ns",
                                            "ipc_ns",     "tmpfs",   "ro_remount", "proc_mount",
                                            "seccomp",    "uts_ns",  "pivot_root", "host_identity"};
static_assert(1 << (sizeof(kCapabilityNames) / sizeof(kCapabilityNames[0]) - 1) == KR_CAP_HOST_IDENTITY,
              "one name per KrCapability bit");

// The switches of the steps in `s` (already allowed on the host) for a
// process that gets its own view: each view step needs the mount namespace,
// the fresh /proc the pid namespace too.
void ApplySteps(int s, KrPolicy* p) {
  p->close_fds = 1;
  p->core_bytes_plus1 = 1;  // no core files in its dirs
  p->user_ns = (s & KR_STEP_USER_NS) != 0;
  p->pid_ns = (s & KR_STEP_PID_NS) != 0;
  p->net_ns = (s & KR_STEP_NET_NS) != 0;
  p->mount_ns = (s & KR_STEP_MOUNT_NS) != 0;
  p->ipc_ns = (s & KR_STEP_IPC_NS) != 0;
  p->readonly_root = p->mount_ns && (s & KR_STEP_READONLY_ROOT);
  p->mount_proc = p->pid_ns && p->mount_ns && (s & KR_STEP_MOUNT_PROC);
  p->new_root = p->mount_ns && (s & KR_STEP_NEW_ROOT);
  if (s & KR_STEP_IDENTITY) p->run_as_uid = kSandboxUid, p->run_as_gid = kSandboxGid;
}

}  // namespace

int CapabilityBit(const std::string& name) {
  for (size_t i = 0; i < sizeof(kCapabilityNames) / sizeof(kCapabilityNames[0]); ++i) {
    if (name == kCapabilityNames[i]) return 1 << i;
  }
  return 0;
}

const char* CapabilityName(int index) {
  constexpr int n = sizeof(kCapabilityNames) / sizeof(kCapabilityNames[0]);
  return index >= 0 && index < n ? kCapabilityNames[index] : nullptr;
}

int CapsFromNames(const std::map<std::string, bool>& caps) {
  int bits = 0;
  for (const auto& [name, on] : caps) {
    if (on) bits |= CapabilityBit(name);
  }
  return bits;
}

int StepBit(const std::string& step) {
  const StepRow* row = Find(step);
  return row == nullptr ? 0 : row->bit;
}

bool StepAllowed(const std::string& step, int caps) {
  const StepRow* row = Find(step);
  return row != nullptr && RowAllowed(*row, caps);
}

KrPolicy PolicyFor(Role role, int caps, const RoleInputs& in) {
  KrPolicy p;
  std::memset(&p, 0, sizeof(p));
  p.parent_death_signal = SIGKILL;  // nothing contained outlives its parent
  p.new_process_group = 1;          // the watchdog kills the group
  switch (role) {
    case Role::kCompiler: {
      const int s = Allowed(kAllSteps, caps);
      ApplySteps(s, &p);
      // Compilers fork their helper tools (cc1plus, ptxas): the compiler profile.
      p.seccomp_profile = (s & KR_STEP_SECCOMP) ? KR_SECCOMP_COMPILER : KR_SECCOMP_NONE;
      return p;
    }
    case Role::kZygote: {
      // The zygote itself: no network for anything it forks, and a mount
      // table where it may mount per-job exchange tmpfs. It must keep the
      // host's root, /proc and identity: it builds each candidate's.
      const int s = Allowed(KR_STEP_USER_NS | KR_STEP_NET_NS | KR_STEP_IPC_NS | KR_STEP_MOUNT_NS, caps);
      p.close_fds = 1;
      p.user_ns = (s & KR_STEP_USER_NS) != 0 && !in.running_as_root;
      p.net_ns = (s & KR_STEP_NET_NS) != 0;
      p.ipc_ns = (s & KR_STEP_IPC_NS) != 0;
      p.mount_ns = (s & KR_STEP_MOUNT_NS) != 0;
      return p;
    }
    case Role::kCandidate: {
      const int s = Allowed(in.steps, caps);
      ApplySteps(s, &p);
      // Candidates get threads, not processes.
      p.seccomp_profile = (s & KR_STEP_SECCOMP) ? KR_SECCOMP_CANDIDATE : KR_SECCOMP_NONE;
      return p;
    }
    case Role::kAgentShell: {
      if (!in.contain) return p;
      // Every step, whatever the probe says: contain logs each refusal and
      // fail_on_degraded turns a refusal into no shell at all.
      p.user_ns = p.pid_ns = p.net_ns = p.mount_ns = p.ipc_ns = p.uts_ns = 1;
      p.readonly_root = 1;
      p.mount_proc = 1;
      p.close_fds = 1;
      p.core_bytes_plus1 = 1;
      // The agent runs compilers and test scripts: processes allowed, sockets
      // other than AF_UNIX refused (the compiler profile).
      p.seccomp_profile = KR_SECCOMP_COMPILER;
      return p;
    }
  }
  return p;
}

}  // namespace kernelrl::sandbox
