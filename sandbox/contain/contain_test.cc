// Drives the isolation sequence through RunContained with real programs and
// checks each protection either holds or is reported as degraded by the probe.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "sandbox/contain/contain.h"
#include "sandbox/contain/spawn.h"

namespace kernelrl::sandbox {
namespace {

std::vector<std::string> BaseEnv() { return {"PATH=/usr/bin:/bin", "LC_ALL=C"}; }

SpawnOptions Shell(const std::string& script) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.env = BaseEnv();
  o.wall_seconds = 10;
  o.policy.parent_death_signal = SIGKILL;
  o.policy.new_process_group = 1;
  o.policy.close_fds = 1;
  return o;
}

class ContainTest : public ::testing::Test {
 protected:
  void SetUp() override { caps_ = ProbeHostCapabilities(); }
  bool Has(int bit) const { return (caps_ & bit) != 0; }
  int caps_ = 0;
};

TEST_F(ContainTest, RunsAProgramAndCapturesOutput) {
  auto r = RunContained(Shell("echo hello; echo oops >&2; exit 3"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status.exit_code, 3);
  EXPECT_EQ(r->stdout_text, "hello\n");
  EXPECT_EQ(r->stderr_text, "oops\n");
}

TEST_F(ContainTest, WatchdogKillsTheWholeProcessGroup) {
  // The shell forks a grandchild that would outlive a plain kill(pid).
  std::string marker = ::testing::TempDir() + "/survivor_" + std::to_string(getpid());
  SpawnOptions o = Shell("(sleep 2; touch " + marker + ") & sleep 30");
  o.wall_seconds = 0.5;
  auto r = RunContained(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->status.timed_out);
  EXPECT_EQ(r->status.term_signal, SIGKILL);
  EXPECT_LT(r->status.wall_ms, 5000);
  sleep(3);
  EXPECT_FALSE(std::ifstream(marker).good()) << "grandchild survived the watchdog";
}

TEST_F(ContainTest, OutputIsCapped) {
  SpawnOptions o = Shell("head -c 1000000 /dev/zero | tr '\\0' x");
  o.max_output_bytes = 1000;
  auto r = RunContained(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stdout_text.size(), 1000u);
  EXPECT_TRUE(r->output_truncated);
}

TEST_F(ContainTest, RlimitFsizeStopsLargeFiles) {
  std::string dir = ::testing::TempDir();
  SpawnOptions o = Shell("head -c 100000 /dev/zero > " + dir + "/big_" + std::to_string(getpid()));
  o.policy.fsize_bytes = 4096;
  auto r = RunContained(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->status.exit_code, 0);  // SIGXFSZ in head, reported by the shell
}

TEST_F(ContainTest, NetworkNamespaceHasNoRoute) {
  if (!Has(KR_CAP_USER_NS) || !Has(KR_CAP_NET_NS)) GTEST_SKIP() << "host forbids net namespaces";
  SpawnOptions o = Shell("cat /proc/net/dev | grep -c ':' ");
  o.policy.user_ns = 1;
  o.policy.net_ns = 1;
  auto r = RunContained(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stdout_text, "1\n") << "only loopback expected; log:\n" << r->contain_log;
}

TEST_F(ContainTest, ReadOnlyRootWithWritableScratch) {
  if (!Has(KR_CAP_USER_NS) || !Has(KR_CAP_MOUNT_NS) || !Has(KR_CAP_TMPFS)) {
    GTEST_SKIP() << "host forbids mount namespaces";
  }
  char tmpl[] = "/tmp/kr_scratch_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string scratch = tmpl;
  std::string outside = ::testing::TempDir() + "/outside_" + std::to_string(getpid());
  SpawnOptions o = Shell("echo ok > " + scratch + "/a && echo scratch_ok; echo bad > " + outside +
                         " && echo outside_written; head -c 200000 /dev/zero > " + scratch + "/big || echo capped");
  o.policy.user_ns = 1;
  o.policy.mount_ns = 1;
  o.policy.pid_ns = 1;
  o.policy.mount_proc = Has(KR_CAP_PROC_MOUNT);
  o.policy.readonly_root = 1;
  o.policy.scratch_dir = scratch.c_str();
  o.policy.scratch_bytes = 65536;
  auto r = RunContained(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->stdout_text.find("scratch_ok"), std::string::npos) << r->contain_log << r->stderr_text;
  EXPECT_EQ(r->stdout_text.find("outside_written"), std::string::npos) << r->contain_log;
  EXPECT_NE(r->stdout_text.find("capped"), std::string::npos) << r->contain_log;
  EXPECT_FALSE(std::ifstream(outside).good());
  EXPECT_FALSE(std::ifstream(scratch + "/a").good()) << "tmpfs must not leak to the host";
  rmdir(scratch.c_str());
}

TEST_F(ContainTest, PidNamespaceHidesHostProcesses) {
  if (!Has(KR_CAP_USER_NS) || !Has(KR_CAP_PID_NS) || !Has(KR_CAP_PROC_MOUNT)) {
    GTEST_SKIP() << "host forbids pid namespaces with a fresh /proc";
  }
  SpawnOptions o = Shell("echo $$; ls /proc | grep -c '^[0-9]'");
  o.policy.user_ns = 1;
  o.policy.mount_ns = 1;
  o.policy.pid_ns = 1;
  o.policy.mount_proc = 1;
  auto r = RunContained(o);
  ASSERT_TRUE(r.ok()) << r.status();
  // pid 1 is the shell; it and `ls`/`grep` are all that exist.
  EXPECT_EQ(r->stdout_text.substr(0, 2), "1\n") << r->contain_log;
  EXPECT_LE(std::atoi(r->stdout_text.substr(2).c_str()), 4) << r->stdout_text;
}

// Runs `body` in a forked child after the candidate seccomp profile; returns
// the wait status.
template <typename F>
int RunUnderCandidateSeccomp(F body) {
  pid_t pid = fork();
  if (pid == 0) {
    KrPolicy p = {};
    p.seccomp_profile = KR_SECCOMP_CANDIDATE;
    StepLog log;
    if (!ContainPhaseSeccomp(p, log)) _exit(100);
    _exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST_F(ContainTest, SeccompCandidateProfileKillsProcessesAndSockets) {
  if (!Has(KR_CAP_SECCOMP)) GTEST_SKIP() << "host forbids seccomp";
  int st = RunUnderCandidateSeccomp([] { return fork() >= 0 ? 0 : 1; });
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS) << "fork: " << st;
  st = RunUnderCandidateSeccomp([] { return socket(AF_INET, SOCK_STREAM, 0) >= 0 ? 0 : 1; });
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS) << "socket: " << st;
  st = RunUnderCandidateSeccomp([] {
    char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
    execv("/bin/true", argv);
    return 1;
  });
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS) << "execve: " << st;
  // Threads stay allowed: CUDA and torch create them.
  st = RunUnderCandidateSeccomp([] {
    int value = 0;
    std::thread t([&value] { value = 7; });
    t.join();
    return value == 7 ? 0 : 1;
  });
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "thread: " << st;
  st = RunUnderCandidateSeccomp([] { return socket(AF_UNIX, SOCK_STREAM, 0) >= 0 ? 0 : 1; });
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "unix socket: " << st;
}

TEST_F(ContainTest, ProbeReportsMissingCapabilitiesInWords) {
  EXPECT_EQ(DescribeMissingCapabilities(~0), "");
  EXPECT_NE(DescribeMissingCapabilities(0).find("seccomp"), std::string::npos);
}

}  // namespace
}  // namespace kernelrl::sandbox
