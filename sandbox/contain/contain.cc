#include "sandbox/contain/contain.h"

#include <signal.h>

#include "sandbox/contain/steps.h"

namespace kernelrl::sandbox {

bool ContainPhaseNamespaces(const KrPolicy& p, StepLog& log) {
  bool ok = SetParentDeathSignal(p.parent_death_signal, log);
  if (p.new_process_group) ok &= EnterNewProcessGroup(log);
  if (p.user_ns) ok &= EnterUserNamespace(log);
  ok &= EnterNamespaces(p, log);
  return ok;
}

bool ContainPhaseChild(const KrPolicy& p, StepLog& log) {
  bool ok = SetParentDeathSignal(p.parent_death_signal, log);
  if (p.mount_ns) ok &= SetupMounts(p, log);
  ok &= ApplyRlimits(p, log);
  ok &= CloseInheritedFds(p, log);
  return ok;
}

bool ContainPhaseSeccomp(const KrPolicy& p, StepLog& log) {
  if (p.seccomp_profile == KR_SECCOMP_NONE) return true;
  if (!SetNoNewPrivs(log)) return false;
  return InstallSeccomp(p.seccomp_profile, log);
}

}  // namespace kernelrl::sandbox
