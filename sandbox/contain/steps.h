// The isolation steps, one small file each (namespaces.cc, mounts.cc,
// root.cc, rlimits.cc, fds.cc, identity.cc, process.cc, seccomp.cc). contain.cc calls them in
// order; each returns true on success and logs exactly what failed and what
// protection is lost. They run in a freshly forked child, so they only use
// async-signal-safe-ish libc calls and no locks.
#ifndef KERNELRL_SANDBOX_CONTAIN_STEPS_H_
#define KERNELRL_SANDBOX_CONTAIN_STEPS_H_

#include "sandbox/contain/policy.h"
#include "sandbox/contain/step_log.h"

namespace kernelrl::sandbox {

// namespaces.cc: unshare(CLONE_NEWUSER) + uid/gid maps (inside_uid/gid onto
// the caller's own ids; 0 for the one-argument form), then the others.
bool EnterUserNamespace(StepLog& log);
bool EnterUserNamespace(int inside_uid, int inside_gid, StepLog& log);
bool EnterNamespaces(const KrPolicy& p, StepLog& log);
// mounts.cc (needs a mount namespace): the host view, read-only.
bool SetupMounts(const KrPolicy& p, StepLog& log);
// root.cc: the constructed root (root_plan.h). *pivoted tells whether the
// process now lives in it; when false nothing changed and the caller falls
// back to SetupMounts.
bool BuildRoot(const KrPolicy& p, StepLog& log, bool* pivoted);
// identity.cc
bool HostIdentityAvailable(int uid);  // privileged: can become host `uid` itself
bool AssumeIdentity(const KrPolicy& p, StepLog& log);
// rlimits.cc
bool ApplyRlimits(const KrPolicy& p, StepLog& log);
// fds.cc
bool CloseInheritedFds(const KrPolicy& p, StepLog& log);
// process.cc
// A uid/gid change clears it (prctl(2)): each phase arms it again after its
// last id change, logged as `step`.
bool SetParentDeathSignal(int sig, StepLog& log, const char* step = "pdeathsig");
bool EnterNewProcessGroup(StepLog& log);
bool SetNoNewPrivs(StepLog& log);
// seccomp.cc
bool InstallSeccomp(int profile, StepLog& log);

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_CONTAIN_STEPS_H_
