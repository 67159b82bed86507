// The containment role table: which isolation steps each kind of contained
// process gets, decided in one place for every caller. The compile stage
// (compiler), the verify stage (zygote) and the agent's shell call PolicyFor
// directly; the trusted harness asks the same table through the C API
// (kr_step_allowed) which steps a candidate may get on this host.
//
// The rule that holds for every role but one: a step runs only when the
// host's probe (ProbeHostCapabilities) reported the capability it needs; a
// capability the probe did not report is absent, never assumed. The agent's
// shell is the exception by design: it asks for every step and lets contain
// log each one the host refuses (WorkspaceIsolation.fail_on_degraded then
// refuses to start it), because a rollout must never silently run with less.
//
// PolicyFor fills the switches (namespaces, filesystem view, seccomp profile,
// identity, process hygiene); paths and limits stay with the caller, which
// knows its job's directories and budgets.
#ifndef KERNELRL_SANDBOX_CONTAIN_ROLES_H_
#define KERNELRL_SANDBOX_CONTAIN_ROLES_H_

#include <map>
#include <string>

#include "sandbox/contain/policy.h"

namespace kernelrl::sandbox {

enum class Role {
  kCompiler,    // nvcc/g++/build_ext.py on a workspace: no network, constructed root, nobody
  kZygote,      // the trusted harness that forks candidates: its own net/ipc/mount namespaces only
  kCandidate,   // the job's code: the steps the job's isolation asks for and the host allows
  kAgentShell,  // the rollout's bash and its jobs: every step asked for, failures logged
};

// Identity contained processes run as (identity.cc): nobody.
inline constexpr int kSandboxUid = 65534;
inline constexpr int kSandboxGid = 65534;

struct RoleInputs {
  // kCandidate: the steps the job asks for, as KrStep bits (the worker's
  // calibrated isolation). Ignored for the other roles.
  int steps = 0;
  // kZygote: the worker runs as root, so a user namespace is not needed to
  // mount (and would cost the zygote its host root).
  bool running_as_root = false;
  // kAgentShell: WorkspaceIsolation.contain; off, the shell gets only its
  // process group and parent-death signal.
  bool contain = true;
};

// The isolation steps of a candidate (the names in the job's isolation map and
// in sandbox/isolation_calibration.cc's plan).
enum KrStep {
  KR_STEP_USER_NS = 1 << 0,
  KR_STEP_PID_NS = 1 << 1,
  KR_STEP_NET_NS = 1 << 2,
  KR_STEP_MOUNT_NS = 1 << 3,
  KR_STEP_IPC_NS = 1 << 4,
  KR_STEP_READONLY_ROOT = 1 << 5,
  KR_STEP_MOUNT_PROC = 1 << 6,
  KR_STEP_SECCOMP = 1 << 7,
  KR_STEP_DATA_LIMIT = 1 << 8,
  KR_STEP_NEW_ROOT = 1 << 9,
  KR_STEP_IDENTITY = 1 << 10,
};

// The KrCapability bit of a capability name as the probe reports it
// ("user_ns", "pivot_root", ...; the harness's hello uses the same names);
// 0 for a name the table does not know.
int CapabilityBit(const std::string& name);
// The name of KrCapability bit number `index` (0, 1, ...); nullptr past the last.
const char* CapabilityName(int index);
// KrCapability bits of the names mapped to true; a name missing or unknown is absent.
int CapsFromNames(const std::map<std::string, bool>& caps);

// The KrStep bit of a step name; 0 for a name the table does not know.
int StepBit(const std::string& step);
// Whether the host (KrCapability bits from the probe) can apply `step`. An
// unknown step is not allowed.
bool StepAllowed(const std::string& step, int caps);

// The policy of `role` on a host with `caps`. String fields are left NULL.
KrPolicy PolicyFor(Role role, int caps, const RoleInputs& inputs = {});

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_CONTAIN_ROLES_H_
