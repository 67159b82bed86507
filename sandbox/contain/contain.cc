#include "sandbox/contain/contain.h"

#include <signal.h>

#include "sandbox/contain/root_plan.h"
#include "sandbox/contain/steps.h"

namespace kernelrl::sandbox {

bool ContainPhaseNamespaces(const KrPolicy& p, StepLog& log) {
  bool ok = SetParentDeathSignal(p.parent_death_signal, log);
  if (p.new_process_group) ok &= EnterNewProcessGroup(log);
  if (p.user_ns) {
    if (HostIdentityAvailable(p.run_as_uid)) {
      // A user namespace made by root could only map root onto itself (the
      // candidate would own every root file); the identity step instead
      // switches to the host uid directly.
      log.Note("user_ns: not needed (privileged worker: the identity step becomes host uid " +
               std::to_string(p.run_as_uid) + ")");
    } else {
      ok &= EnterUserNamespace(p.run_as_uid, p.run_as_uid > 0 ? p.run_as_gid : 0, log);
    }
  }
  ok &= EnterNamespaces(p, log);
  ok &= SetParentDeathSignal(p.parent_death_signal, log, "pdeathsig_after_ids");
  // The view the child will build (phase 2), logged by the trusted side.
  if (p.new_root) log.Note(DescribeRootPlan(PlanRoot(p)));
  return ok;
}

bool ContainPhaseChild(const KrPolicy& p, StepLog& log) {
  bool ok = SetParentDeathSignal(p.parent_death_signal, log);
  bool pivoted = false;
  if (p.new_root) ok &= BuildRoot(p, log, &pivoted);
  if (p.mount_ns && !pivoted) ok &= SetupMounts(p, log);
  ok &= ApplyRlimits(p, log);
  ok &= CloseInheritedFds(p, log);
  ok &= AssumeIdentity(p, log);
  // The kernel clears the parent-death signal when the uid changes: armed
  // only before the identity step, a candidate would outlive a killed worker.
  ok &= SetParentDeathSignal(p.parent_death_signal, log, "pdeathsig_after_ids");
  return ok;
}

bool ContainPhaseSeccomp(const KrPolicy& p, StepLog& log) {
  if (p.seccomp_profile == KR_SECCOMP_NONE) return true;
  if (!SetNoNewPrivs(log)) return false;
  return InstallSeccomp(p.seccomp_profile, log);
}

}  // namespace kernelrl::sandbox
