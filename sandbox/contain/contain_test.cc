// Drives the isolation sequence through RunContained with real programs and
// checks each protection either holds or is reported as degraded by the probe.
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "sandbox/contain/contain.h"
#include "sandbox/contain/host_memory.h"
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

// What CUDA writes under the read-only root (docs/SANDBOX.md, "readonly_root
// and CUDA"): cuInit names its threads through /proc/<pid>/task/<tid>/comm
// (error 304 when /proc is read-only); shared memory goes to /dev/shm, which
// is the job's scratch. /proc/sys stays read-only.
TEST_F(ContainTest, ReadOnlyRootLeavesWhatCudaWrites) {
  if (!Has(KR_CAP_USER_NS) || !Has(KR_CAP_MOUNT_NS) || !Has(KR_CAP_TMPFS) || !Has(KR_CAP_RO_REMOUNT)) {
    GTEST_SKIP() << "host forbids mount namespaces or read-only remounts";
  }
  char tmpl[] = "/tmp/kr_scratch_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string scratch = tmpl;
  const std::string shm_name = "kr_shm_" + std::to_string(getpid());
  SpawnOptions o = Shell(
      "echo kr-cuda-thread > /proc/$$/task/$$/comm && echo comm=$(cat /proc/$$/comm); "
      "echo x > /dev/shm/" + shm_name + " && ls " + scratch + " | grep -c " + shm_name + "; "
      "grep ' /proc/sys ' /proc/self/mounts | cut -d' ' -f4 | cut -d, -f1 | sed 's/^/sys=/'; "
      "echo bad > /usr/kr_not_here 2>/dev/null || echo usr_ro");
  o.policy.user_ns = 1;
  o.policy.mount_ns = 1;
  o.policy.pid_ns = Has(KR_CAP_PID_NS) && Has(KR_CAP_PROC_MOUNT);
  o.policy.mount_proc = o.policy.pid_ns;
  o.policy.readonly_root = 1;
  o.policy.scratch_dir = scratch.c_str();
  o.policy.scratch_bytes = 1 << 20;
  auto r = RunContained(o);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string& out = r->stdout_text;
  EXPECT_NE(out.find("comm=kr-cuda-thread"), std::string::npos) << out << r->stderr_text << r->contain_log;
  EXPECT_NE(out.find("\n1\n"), std::string::npos) << "/dev/shm is not the scratch: " << out << r->contain_log;
  EXPECT_NE(out.find("sys=ro"), std::string::npos) << out << r->contain_log;
  EXPECT_NE(out.find("usr_ro"), std::string::npos) << out;
  EXPECT_NE(r->contain_log.find("proc_rw"), std::string::npos) << r->contain_log;
  EXPECT_FALSE(std::ifstream("/dev/shm/" + shm_name).good()) << "wrote the host's /dev/shm";
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

// Attack: a contained program outlives its supervisor. The kernel clears the
// parent-death signal when a process changes its uid, so one armed before the
// identity step is gone after it, and a candidate whose worker is killed keeps
// running (seen on a GPU: a spinning kernel held the device after its worker
// was stopped). The supervisor here is a forked process we SIGKILL mid-run.
class OutliveSupervisorTest : public ContainTest, public ::testing::WithParamInterface<bool> {};

TEST_P(OutliveSupervisorTest, ContainedChildDiesWithItsSupervisor) {
  const bool pid_ns = GetParam();
  if (geteuid() != 0) GTEST_SKIP() << "the identity step (uid 65534) needs a privileged worker";
  if (pid_ns && (!Has(KR_CAP_PID_NS) || !Has(KR_CAP_PROC_MOUNT))) GTEST_SKIP() << "host forbids pid namespaces";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t supervisor = fork();
  ASSERT_GE(supervisor, 0);
  if (supervisor == 0) {
    close(ready[0]);
    // The child says it runs, then spins like a kernel that never ends.
    SpawnOptions o = Shell("echo x >&3; while :; do :; done");
    o.wall_seconds = 60;
    o.policy.run_as_uid = 65534;
    o.policy.run_as_gid = 65534;
    o.policy.pid_ns = pid_ns ? 1 : 0;
    o.policy.mount_ns = pid_ns ? 1 : 0;
    o.pass_fds = {{ready[1], 3}};
    (void)RunContained(o);
    _exit(0);
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1) << "the contained child never started";
  close(ready[0]);
  // The contained child is the supervisor's only child; find it by parentage.
  auto children_of = [](pid_t parent) {
    std::vector<pid_t> out;
    std::ifstream f("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) + "/children");
    for (pid_t p; f >> p;) out.push_back(p);
    return out;
  };
  std::vector<pid_t> tree = children_of(supervisor);
  ASSERT_FALSE(tree.empty()) << "no child under the supervisor";
  for (size_t i = 0; i < tree.size(); ++i) {
    for (pid_t g : children_of(tree[i])) tree.push_back(g);
  }
  ASSERT_EQ(kill(supervisor, SIGKILL), 0);
  ASSERT_EQ(waitpid(supervisor, nullptr, 0), supervisor);
  // Each process of the contained tree must be gone (or a zombie awaiting reaping by init).
  auto alive = [](pid_t p) {
    std::ifstream st("/proc/" + std::to_string(p) + "/stat");
    std::string line;
    if (!std::getline(st, line)) return false;
    const size_t close_paren = line.rfind(')');
    return close_paren != std::string::npos && line.size() > close_paren + 2 && line[close_paren + 2] != 'Z';
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::vector<pid_t> survivors = tree;
  while (!survivors.empty() && std::chrono::steady_clock::now() < deadline) {
    std::vector<pid_t> still;
    for (pid_t p : survivors) {
      if (alive(p)) still.push_back(p);
    }
    survivors.swap(still);
    if (!survivors.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (pid_t p : survivors) kill(p, SIGKILL);  // Leave nothing spinning behind a failure.
  EXPECT_TRUE(survivors.empty()) << survivors.size() << " contained process(es) outlived their supervisor";
}

INSTANTIATE_TEST_SUITE_P(PidNamespace, OutliveSupervisorTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "OwnPidNamespace" : "HostPidNamespace"; });

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

// --- host-memory cap of the watchdog ---------------------------------------

// Touches `total` bytes of anonymous memory in 16 MiB steps (mmap + memset:
// no malloc after fork), then waits. Never returns.
[[noreturn]] void TouchThenWait(long long total, double wait_s) {
  const size_t step = 16u << 20;
  for (long long done = 0; done < total; done += step) {
    void* p = mmap(nullptr, step, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) _exit(2);
    memset(p, 1, step);
  }
  usleep(static_cast<useconds_t>(wait_s * 1e6));
  _exit(0);
}

SuperviseOptions Capped(long long cap) {
  SuperviseOptions o;
  o.wall_seconds = 10;
  o.memory_cap_bytes = cap;
  o.memory_poll_ms = 5;
  return o;
}

TEST_F(ContainTest, WatchdogKillsAHostMemoryHogWithTheMemoryCause) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setpgid(0, 0);
    TouchThenWait(int64_t{8} << 30, 30);  // 8 GiB unless stopped
  }
  SuperviseResult r = Supervise(pid, Capped(256 << 20));
  EXPECT_TRUE(r.memory_exceeded);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.term_signal, SIGKILL);
  EXPECT_GT(r.memory_at_kill_bytes, 256 << 20);
  // One poll period of overshoot, not gigabytes.
  EXPECT_LT(r.memory_at_kill_bytes, int64_t{1} << 30) << FormatBytes(r.memory_at_kill_bytes);
  EXPECT_LT(r.wall_ms, 5000);
  EXPECT_GT(r.memory_samples, 0);
}

TEST_F(ContainTest, WatchdogLeavesAChildUnderTheCapAlone) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setpgid(0, 0);
    TouchThenWait(64 << 20, 0.3);
  }
  SuperviseResult r = Supervise(pid, Capped(256 << 20));
  EXPECT_FALSE(r.memory_exceeded);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.term_signal, 0);
  // It saw the child's 64 MiB while it waited.
  EXPECT_GE(r.peak_memory_bytes, 64 << 20) << FormatBytes(r.peak_memory_bytes);
  EXPECT_LT(r.peak_memory_bytes, 256 << 20);
}

TEST_F(ContainTest, WatchdogSumsHostMemoryOverTheProcessTree) {
  // Three children of 96 MiB each: none alone exceeds 256 MiB, together they do.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setpgid(0, 0);
    for (int i = 0; i < 3; ++i) {
      if (fork() == 0) TouchThenWait(96 << 20, 30);
    }
    pause();
    _exit(0);
  }
  SuperviseResult r = Supervise(pid, Capped(256 << 20));
  EXPECT_TRUE(r.memory_exceeded);
  EXPECT_GT(r.memory_at_kill_bytes, 256 << 20);
  EXPECT_LT(r.wall_ms, 5000);
}

TEST_F(ContainTest, HostMemoryOfThisProcessIsReadable) {
  EXPECT_GT(ProcessHostMemoryBytes(getpid()), 0);
  EXPECT_EQ(ProcessHostMemoryBytes(-1), -1);
  EXPECT_EQ(FormatBytes(int64_t{3} << 29), "1.50 GiB");
}

TEST_F(ContainTest, MemoryCgroupProbeSaysWhyNot) {
  // Either the host lets us create a memory cgroup or the probe says why not;
  // the watchdog cap above works either way.
  const std::string why = ProbeMemoryCgroup("");
  if (!why.empty()) GTEST_SKIP() << "no cgroup v2 memory controller here: " << why;
  std::string err;
  const std::string path = CreateMemoryCgroup("", "kernelrl-test-" + std::to_string(getpid()), 64 << 20, &err);
  ASSERT_FALSE(path.empty()) << err;
  EXPECT_EQ(RemoveMemoryCgroup(path, nullptr), 0);
}

}  // namespace
}  // namespace kernelrl::sandbox
