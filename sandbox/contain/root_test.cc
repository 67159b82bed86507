// The constructed root and the sandbox identity (root_plan.h, root.cc,
// identity.cc): the plan holds exactly what was asked, and a real shell run
// through RunContained sees only that view, as uid 65534 with no
// capabilities. Where the host probe says a step is available the test
// asserts it happened; where not, it checks the step is reported missing.
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "sandbox/contain/contain.h"
#include "sandbox/contain/echo.h"
#include "sandbox/contain/root_plan.h"
#include "sandbox/contain/spawn.h"

namespace kernelrl::sandbox {
namespace {

std::string RandomToken() {
  std::random_device rd;
  return std::to_string(rd()) + std::to_string(rd());
}

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

bool Contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// A job directory like the zygote's: workspace (ro), exchange (rw), scratch,
// trusted (must stay invisible), next to another job's directory.
struct JobDirs {
  std::string root, workspace, exchange, scratch, trusted, other_job_secret;
  JobDirs() {
    char tmp[4096];
    root = std::string(realpath(::testing::TempDir().c_str(), tmp)) + "/rootjob_" + std::to_string(getpid()) + "_" +
           RandomToken().substr(0, 6);
    workspace = root + "/job/workspace";
    exchange = root + "/job/exchange";
    scratch = root + "/job/scratch";
    trusted = root + "/job/trusted";
    for (const std::string& d : {root, root + "/job", workspace, exchange, scratch, trusted, root + "/other"}) {
      mkdir(d.c_str(), 0700);
    }
    WriteFile(workspace + "/model_new.py", "print('hi')\n");
    WriteFile(trusted + "/reference.log", "trusted " + RandomToken() + "\n");
    other_job_secret = RandomToken();
    WriteFile(root + "/other/secret.txt", other_job_secret);
  }
};

SpawnOptions ConfinedShell(const JobDirs& j, const std::string& script, int caps) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.env = {"PATH=/usr/bin:/bin", "LC_ALL=C", "TMPDIR=" + j.scratch};
  o.wall_seconds = 20;
  KrPolicy& p = o.policy;
  p.parent_death_signal = SIGKILL;
  p.new_process_group = 1;
  p.close_fds = 1;
  p.user_ns = (caps & KR_CAP_USER_NS) != 0;
  p.pid_ns = (caps & KR_CAP_PID_NS) != 0;
  p.mount_ns = (caps & KR_CAP_MOUNT_NS) != 0;
  p.net_ns = (caps & KR_CAP_NET_NS) != 0;
  p.mount_proc = p.pid_ns && (caps & KR_CAP_PROC_MOUNT) != 0;
  p.new_root = 1;
  p.scratch_dir = j.scratch.c_str();
  p.scratch_bytes = 8 << 20;
  p.writable_dirs = j.exchange.c_str();
  p.job_ro_dirs = j.workspace.c_str();
  p.run_as_uid = 65534;
  p.run_as_gid = 65534;
  o.cwd = j.workspace;
  return o;
}

TEST(RootPlanTest, HoldsTheSystemTheAskedPathsAndNothingElse) {
  JobDirs j;
  KrPolicy p = {};
  p.scratch_dir = j.scratch.c_str();
  p.writable_dirs = j.exchange.c_str();
  const std::string ro = j.workspace + ":/nonexistent_" + RandomToken() + ":" + j.root;
  p.ro_paths = ro.c_str();
  RootPlan plan = PlanRoot(p);
  bool usr = false, workspace = false, exchange = false, scratch = false;
  for (const RootEntry& e : plan.entries) {
    usr |= e.kind == RootEntry::kBindRo && e.path == "/usr";
    workspace |= e.kind == RootEntry::kBindRo && e.path == j.workspace;
    exchange |= e.kind == RootEntry::kBindRw && e.path == j.exchange;
    scratch |= e.kind == RootEntry::kScratch && e.path == j.scratch;
    for (const char* never : {"/root", "/home", "/etc/shadow", "/var", "/run"}) {
      if (e.kind == RootEntry::kBindRo) {
        EXPECT_NE(e.path, never);
      }
    }
    // The job's parent (asked for above) would expose trusted/ and other jobs.
    if (e.kind == RootEntry::kBindRo) {
      EXPECT_FALSE(e.path == j.root) << "job parent bound";
    }
  }
  EXPECT_TRUE(usr);
  EXPECT_TRUE(workspace);
  EXPECT_TRUE(exchange);
  EXPECT_TRUE(scratch);
  EXPECT_EQ(plan.root_dir, j.scratch);
  const std::string text = DescribeRootPlan(plan);
  EXPECT_TRUE(Contains(text, "contains the job's own directories")) << text;
  EXPECT_TRUE(Contains(text, "/nonexistent_")) << text;
  EXPECT_TRUE(Contains(text, j.workspace)) << text;
}

TEST(EchoTest, CutCopiesSaySoAndKeepTheRightEnd) {
  std::random_device rd;
  const size_t n = 100 + rd() % 400, max = 10 + rd() % 80;
  std::string text;
  for (size_t i = 0; i < n; ++i) text += static_cast<char>('a' + rd() % 26);
  const std::string head = CapHead(text, max), tail = CapTail(text, max);
  EXPECT_EQ(head.substr(0, max), text.substr(0, max));
  EXPECT_TRUE(Contains(head, "[... " + std::to_string(n - max) + " bytes cut]")) << head;
  EXPECT_EQ(tail.substr(tail.size() - max), text.substr(n - max));
  EXPECT_TRUE(Contains(tail, "[" + std::to_string(n - max) + " bytes cut ...]")) << tail;
  EXPECT_EQ(CapHead(text, n), text);
  EXPECT_EQ(CapTail(text, n + 1), text);
}

TEST(RootPlanTest, ToolPathsGiveTheInstallPrefix) {
  std::vector<std::string> sh = ToolPaths("sh", "/usr/bin:/bin");
  ASSERT_FALSE(sh.empty());
  EXPECT_TRUE(sh[0] == "/usr" || sh[0] == "/") << sh[0];
  EXPECT_TRUE(ToolPaths("no_such_tool_" + RandomToken(), "/usr/bin").empty());
}

class ConstructedRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    caps_ = ProbeHostCapabilities();
    if (!(caps_ & KR_CAP_PIVOT_ROOT)) {
      EXPECT_NE(DescribeMissingCapabilities(caps_).find("new_root"), std::string::npos);
      GTEST_SKIP() << "host refuses pivot_root into a tmpfs: " << DescribeMissingCapabilities(caps_);
    }
  }
  int caps_ = 0;
};

TEST_F(ConstructedRootTest, TheShellSeesOnlyItsView) {
  JobDirs j;
  const std::string script =
      "echo uid=$(id -u) gid=$(id -g); "
      "ls -a / | tr '\\n' ' '; echo; "
      "cat /etc/shadow >/dev/null 2>&1 && echo SHADOW_READ; "
      "ls /root/ 2>/dev/null | grep -v '^\\.' | grep -q . && echo ROOT_LISTED; "
      "ls /home 2>/dev/null | grep -q . && echo HOME_LISTED; "
      "cat " + j.root + "/other/secret.txt 2>/dev/null; "
      "ls " + j.trusted + " 2>/dev/null | grep -q . && echo TRUSTED_LISTED; "
      "cat model_new.py; "
      "echo x > " + j.workspace + "/planted 2>/dev/null && echo WORKSPACE_WRITTEN; "
      "echo x > /planted 2>/dev/null && echo ROOT_WRITTEN; "
      "echo x > /usr/planted 2>/dev/null && echo USR_WRITTEN; "
      "echo x > " + j.scratch + "/ok && echo SCRATCH_OK; "
      "echo x > " + j.exchange + "/ok && echo EXCHANGE_OK; "
      "grep CapEff /proc/self/status; "
      "ls /proc | grep -c '^[0-9]' ";
  auto r = RunContained(ConfinedShell(j, script, caps_));
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string& out = r->stdout_text;
  SCOPED_TRACE(out + "\n--- stderr\n" + r->stderr_text + "\n--- contain log\n" + r->contain_log);
  EXPECT_TRUE(Contains(r->contain_log, "root: filesystem view")) << "the view is not logged";
  EXPECT_TRUE(Contains(r->contain_log, "new_root: ok"));
  EXPECT_TRUE(Contains(out, "uid=65534 gid=65534"));
  EXPECT_TRUE(Contains(out, "CapEff:\t0000000000000000"));
  EXPECT_TRUE(Contains(out, "print('hi')")) << "workspace not readable";
  for (const char* leak : {"SHADOW_READ", "ROOT_LISTED", "HOME_LISTED", "TRUSTED_LISTED", "WORKSPACE_WRITTEN",
                           "ROOT_WRITTEN", "USR_WRITTEN"}) {
    EXPECT_FALSE(Contains(out, leak)) << leak;
  }
  EXPECT_FALSE(Contains(out, j.other_job_secret)) << "another job's file was read";
  EXPECT_TRUE(Contains(out, "SCRATCH_OK"));
  EXPECT_TRUE(Contains(out, "EXCHANGE_OK"));
  // "/" holds the view's top-level names only.
  for (const char* absent : {" home ", " root ", " var ", " opt ", " srv ", " mnt ", " boot "}) {
    if (std::string(absent) == " root " && Contains(r->contain_log, " /root/")) continue;  // python under /root
    EXPECT_FALSE(Contains(out, absent)) << absent;
  }
  struct stat st;
  EXPECT_NE(stat((j.workspace + "/planted").c_str(), &st), 0);
  EXPECT_EQ(stat((j.exchange + "/ok").c_str(), &st), 0) << "exchange write did not reach the host dir";
  if (caps_ & KR_CAP_HOST_IDENTITY) {
    EXPECT_EQ(st.st_uid, 65534u) << "candidate files belong to the host's nobody";
  }
}

TEST_F(ConstructedRootTest, ProcShowsOnlyTheSandboxesProcesses) {
  if (!(caps_ & KR_CAP_PROC_MOUNT)) GTEST_SKIP() << "no fresh /proc on this host";
  JobDirs j;
  auto r = RunContained(ConfinedShell(j, "ls /proc | grep -c '^[0-9]'; cat /proc/1/cmdline | tr '\\0' ' '", caps_));
  ASSERT_TRUE(r.ok()) << r.status();
  // sh, ls, grep (and the pipe's other side): a handful, never the host's.
  EXPECT_LT(std::atoi(r->stdout_text.c_str()), 8) << r->stdout_text;
  EXPECT_TRUE(Contains(r->stdout_text, "/bin/sh -c")) << "pid 1 is not the sandboxed shell: " << r->stdout_text;
}

// The compile stage's view: the toolchain found from the tool's name is
// enough for g++ to build a shared object as nobody, and the build dir is the
// only place it can write.
TEST_F(ConstructedRootTest, TheCompilerBuildsInItsView) {
  JobDirs j;
  WriteFile(j.workspace + "/k.cc", "extern \"C\" int twice(int x) { return 2 * x; }\n");
  const std::string out = j.exchange;
  SpawnOptions o = ConfinedShell(j, "g++ -O2 -shared -fPIC k.cc -o " + out + "/k.so && echo BUILT", caps_);
  std::string ro;
  for (const std::string& p : ToolPaths("g++", "/usr/bin:/bin")) ro += p + ":";
  o.policy.ro_paths = ro.c_str();
  o.env.push_back("TMPDIR=" + out);
  auto r = RunContained(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(Contains(r->stdout_text, "BUILT")) << r->stderr_text << "\n" << r->contain_log;
  struct stat st;
  ASSERT_EQ(stat((out + "/k.so").c_str(), &st), 0);
  EXPECT_GT(st.st_size, 0);
}

}  // namespace
}  // namespace kernelrl::sandbox
