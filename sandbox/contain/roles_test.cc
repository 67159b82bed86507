// The role table as a table: each role's switches on a host with every
// capability, with none, and with each one missing; and the step rule the
// harness asks through the C API (a capability not reported is absent).
#include "sandbox/contain/roles.h"

#include <signal.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kernelrl::sandbox {
namespace {

constexpr int kAllCaps = (KR_CAP_HOST_IDENTITY << 1) - 1;
constexpr int kAllSteps = (KR_STEP_IDENTITY << 1) - 1;

// The switches PolicyFor decides, as one line (paths and limits are the caller's).
std::string Switches(const KrPolicy& p) {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (on) s += std::string(s.empty() ? "" : " ") + name;
  };
  add(p.user_ns, "user");
  add(p.pid_ns, "pid");
  add(p.net_ns, "net");
  add(p.mount_ns, "mnt");
  add(p.ipc_ns, "ipc");
  add(p.uts_ns, "uts");
  add(p.readonly_root, "ro");
  add(p.mount_proc, "proc");
  add(p.new_root, "root");
  add(p.seccomp_profile == KR_SECCOMP_COMPILER, "seccomp=compiler");
  add(p.seccomp_profile == KR_SECCOMP_CANDIDATE, "seccomp=candidate");
  add(p.run_as_uid == kSandboxUid && p.run_as_gid == kSandboxGid, "nobody");
  add(p.close_fds, "closefds");
  return s;
}

struct Row {
  const char* what;
  Role role;
  int caps;
  RoleInputs inputs;
  const char* want;
};

RoleInputs Steps(int steps) {
  RoleInputs in;
  in.steps = steps;
  return in;
}
RoleInputs AsRoot() {
  RoleInputs in;
  in.running_as_root = true;
  return in;
}
RoleInputs Uncontained() {
  RoleInputs in;
  in.contain = false;
  return in;
}

TEST(RolesTest, EachRoleOnEveryNoAndPartialHosts) {
  const std::vector<Row> rows = {
      {"compiler, full host", Role::kCompiler, kAllCaps, {},
       "user pid net mnt ipc ro proc root seccomp=compiler nobody closefds"},
      {"compiler, bare host", Role::kCompiler, 0, {}, "closefds"},
      {"compiler, no pivot_root", Role::kCompiler, kAllCaps & ~KR_CAP_PIVOT_ROOT, {},
       "user pid net mnt ipc ro proc seccomp=compiler nobody closefds"},
      {"compiler, no mount ns: no view steps", Role::kCompiler, kAllCaps & ~KR_CAP_MOUNT_NS, {},
       "user pid net ipc seccomp=compiler nobody closefds"},
      {"compiler, no user ns but a host uid", Role::kCompiler, kAllCaps & ~KR_CAP_USER_NS, {},
       "pid net mnt ipc ro proc root seccomp=compiler nobody closefds"},
      {"compiler, no uid to switch to", Role::kCompiler, kAllCaps & ~KR_CAP_USER_NS & ~KR_CAP_HOST_IDENTITY, {},
       "pid net mnt ipc ro proc root seccomp=compiler closefds"},
      {"compiler, no seccomp", Role::kCompiler, kAllCaps & ~KR_CAP_SECCOMP, {},
       "user pid net mnt ipc ro proc root nobody closefds"},
      {"zygote, full host", Role::kZygote, kAllCaps, {}, "user net mnt ipc closefds"},
      {"zygote as root keeps the host's root", Role::kZygote, kAllCaps, AsRoot(), "net mnt ipc closefds"},
      {"zygote, bare host", Role::kZygote, 0, {}, "closefds"},
      {"candidate, every step asked", Role::kCandidate, kAllCaps, Steps(kAllSteps),
       "user pid net mnt ipc ro proc root seccomp=candidate nobody closefds"},
      {"candidate, nothing asked", Role::kCandidate, kAllCaps, Steps(0), "closefds"},
      {"candidate, every step on a bare host", Role::kCandidate, 0, Steps(kAllSteps), "closefds"},
      {"candidate, calibration dropped new_root and identity", Role::kCandidate, kAllCaps,
       Steps(kAllSteps & ~KR_STEP_NEW_ROOT & ~KR_STEP_IDENTITY),
       "user pid net mnt ipc ro proc seccomp=candidate closefds"},
      {"candidate, no proc mount", Role::kCandidate, kAllCaps & ~KR_CAP_PROC_MOUNT, Steps(kAllSteps),
       "user pid net mnt ipc ro root seccomp=candidate nobody closefds"},
      {"agent shell asks for everything", Role::kAgentShell, kAllCaps, {},
       "user pid net mnt ipc uts ro proc seccomp=compiler closefds"},
      {"agent shell asks even where the probe says no", Role::kAgentShell, 0, {},
       "user pid net mnt ipc uts ro proc seccomp=compiler closefds"},
      {"agent shell with containment off", Role::kAgentShell, kAllCaps, Uncontained(), ""},
  };
  for (const Row& r : rows) {
    const KrPolicy p = PolicyFor(r.role, r.caps, r.inputs);
    EXPECT_EQ(Switches(p), r.want) << r.what;
    EXPECT_EQ(p.parent_death_signal, SIGKILL) << r.what;
    EXPECT_EQ(p.new_process_group, 1) << r.what;
    EXPECT_EQ(p.ro_paths, nullptr) << r.what << ": paths are the caller's";
  }
}

TEST(RolesTest, AStepRunsOnlyWhereTheProbeReportedWhatItNeeds) {
  struct StepRow {
    const char* step;
    int needs;  // a host with all but these bits refuses the step
  };
  const std::vector<StepRow> steps = {
      {"user_ns", KR_CAP_USER_NS},       {"pid_ns", KR_CAP_PID_NS},
      {"net_ns", KR_CAP_NET_NS},         {"mount_ns", KR_CAP_MOUNT_NS},
      {"ipc_ns", KR_CAP_IPC_NS},         {"readonly_root", KR_CAP_RO_REMOUNT},
      {"mount_proc", KR_CAP_PROC_MOUNT}, {"seccomp", KR_CAP_SECCOMP},
      {"new_root", KR_CAP_PIVOT_ROOT},   {"identity", KR_CAP_USER_NS | KR_CAP_HOST_IDENTITY},
  };
  for (const StepRow& s : steps) {
    EXPECT_TRUE(StepAllowed(s.step, kAllCaps)) << s.step;
    EXPECT_FALSE(StepAllowed(s.step, 0)) << s.step << ": not probed is absent";
    EXPECT_FALSE(StepAllowed(s.step, kAllCaps & ~s.needs)) << s.step;
    EXPECT_NE(StepBit(s.step), 0) << s.step;
  }
  EXPECT_TRUE(StepAllowed("identity", KR_CAP_USER_NS));
  EXPECT_TRUE(StepAllowed("identity", KR_CAP_HOST_IDENTITY));
  EXPECT_TRUE(StepAllowed("data_limit", 0)) << "an rlimit needs nothing of the host";
  EXPECT_FALSE(StepAllowed("no_such_step", kAllCaps)) << "an unknown step is never assumed";
  EXPECT_EQ(StepBit("no_such_step"), 0);
}

}  // namespace
}  // namespace kernelrl::sandbox
