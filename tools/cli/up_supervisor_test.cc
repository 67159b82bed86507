// Supervisor on real child processes (/bin/sh): restart after crash and kill -9
// with doubling back-off, giving up on a crash loop, SIGTERM then SIGKILL on
// stop, argv changes for the next run, one log file across restarts.
#include "tools/cli/up_supervisor.h"

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kernelrl::up {
namespace {

class Recorder {
 public:
  void Add(const SupervisorEvent& e) {
    absl::MutexLock lock(&mu_);
    events_.push_back(e);
    times_.push_back(absl::Now());
  }
  // Waits until `pred` holds over the events (or 20 s pass).
  bool WaitFor(const std::function<bool(const std::vector<SupervisorEvent>&)>& pred) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      {
        absl::MutexLock lock(&mu_);
        if (pred(events_)) return true;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }
  std::vector<SupervisorEvent> events() {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  std::vector<absl::Time> times() {
    absl::MutexLock lock(&mu_);
    return times_;
  }

 private:
  absl::Mutex mu_;
  std::vector<SupervisorEvent> events_;
  std::vector<absl::Time> times_;
};

int Count(const std::vector<SupervisorEvent>& events, SupervisorEvent::Kind kind, const std::string& name) {
  int n = 0;
  for (const auto& e : events) n += e.kind == kind && e.name == name;
  return n;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string TmpPath(const std::string& leaf) {
  const char* dir = getenv("TEST_TMPDIR");
  return absl::StrCat(dir ? dir : "/tmp", "/", leaf, "-", getpid());
}

ChildSpec Shell(const std::string& name, const std::string& script) {
  return {name, {"/bin/sh", "-c", script}, TmpPath(name + ".log")};
}

TEST(SupervisorTest, CrashingChildIsRestartedWithDoublingBackoffThenGivenUp) {
  std::mt19937 rng(std::random_device{}());
  const int code = std::uniform_int_distribution<int>(1, 120)(rng);
  Recorder rec;
  RestartPolicy policy;
  policy.initial_backoff = absl::Milliseconds(40);
  policy.max_backoff = absl::Seconds(1);
  policy.stable_after = absl::Seconds(5);
  policy.max_quick_failures = 4;
  Supervisor sup(policy, [&](const SupervisorEvent& e) { rec.Add(e); });
  ASSERT_TRUE(sup.Start(Shell("crasher", absl::StrCat("echo run; exit ", code))).ok());
  ASSERT_TRUE(rec.WaitFor([](auto& ev) { return Count(ev, SupervisorEvent::kGaveUp, "crasher") == 1; }));

  const auto events = rec.events();
  const auto times = rec.times();
  EXPECT_EQ(Count(events, SupervisorEvent::kStarted, "crasher"), 4);
  EXPECT_EQ(Count(events, SupervisorEvent::kRestarting, "crasher"), 3);
  std::vector<absl::Time> exits, starts;
  std::vector<std::string> delays;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].kind == SupervisorEvent::kExited) {
      EXPECT_EQ(events[i].detail, absl::StrCat("exit ", code));
      exits.push_back(times[i]);
    }
    if (events[i].kind == SupervisorEvent::kStarted) starts.push_back(times[i]);
    if (events[i].kind == SupervisorEvent::kRestarting) delays.push_back(events[i].detail);
  }
  EXPECT_EQ(delays, (std::vector<std::string>{"in 40ms", "in 80ms", "in 160ms"}));
  // A restart never comes before its back-off: 40 ms, 80 ms, 160 ms after each exit.
  for (int i = 0; i < 3; ++i) {
    EXPECT_GE(starts[i + 1] - exits[i], absl::Milliseconds(40 << i) - absl::Milliseconds(5)) << i;
  }
  EXPECT_TRUE(sup.State("crasher").gave_up);
  EXPECT_EQ(sup.State("crasher").restarts, 3);
  // One log for every run.
  const std::string log = ReadFile(TmpPath("crasher.log"));
  size_t runs = 0;
  for (size_t p = log.find("run"); p != std::string::npos; p = log.find("run", p + 1)) ++runs;
  EXPECT_EQ(runs, 4u);
}

TEST(SupervisorTest, KilledChildIsRestartedWithItsNewArgvAndStopIsFinal) {
  Recorder rec;
  RestartPolicy policy;
  policy.initial_backoff = absl::Milliseconds(20);
  Supervisor sup(policy, [&](const SupervisorEvent& e) { rec.Add(e); });
  std::mt19937 rng(std::random_device{}());
  const std::string first = absl::StrCat("first-", rng()), second = absl::StrCat("second-", rng());
  ASSERT_TRUE(sup.Start(Shell("server", absl::StrCat("echo ", first, "; exec sleep 60"))).ok());
  const pid_t pid1 = sup.State("server").pid;
  ASSERT_GT(pid1, 0);
  EXPECT_TRUE(sup.State("server").running);

  ASSERT_TRUE(rec.WaitFor([&](auto&) { return ReadFile(TmpPath("server.log")).find(first) != std::string::npos; }));
  sup.SetArgv("server", {"/bin/sh", "-c", absl::StrCat("echo ", second, "; exec sleep 60")});
  ASSERT_EQ(kill(pid1, SIGKILL), 0);
  ASSERT_TRUE(rec.WaitFor([](auto& ev) { return Count(ev, SupervisorEvent::kStarted, "server") == 2; }));
  const ChildState after = sup.State("server");
  EXPECT_NE(after.pid, pid1);
  EXPECT_EQ(after.restarts, 1);
  const auto events = rec.events();
  auto exited = std::find_if(events.begin(), events.end(), [](auto& e) { return e.kind == SupervisorEvent::kExited; });
  ASSERT_NE(exited, events.end());
  EXPECT_EQ(exited->detail, "signal 9 (Killed)");
  EXPECT_EQ(exited->pid, pid1);
  ASSERT_TRUE(rec.WaitFor([&](auto&) { return ReadFile(TmpPath("server.log")).find(second) != std::string::npos; }));

  sup.Stop({"server"}, absl::Seconds(5));
  EXPECT_FALSE(sup.State("server").running);
  EXPECT_EQ(Count(rec.events(), SupervisorEvent::kStopped, "server"), 1);
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(Count(rec.events(), SupervisorEvent::kStarted, "server"), 2) << "a stopped child came back";
}

TEST(SupervisorTest, StopEscalatesToSigkillAfterGrace) {
  Recorder rec;
  Supervisor sup(RestartPolicy{}, [&](const SupervisorEvent& e) { rec.Add(e); });
  // Ignores SIGTERM; the marker says when the trap is installed.
  const std::string marker = TmpPath("stubborn.ready");
  unlink(marker.c_str());
  ASSERT_TRUE(sup.Start(Shell("stubborn", absl::StrCat("trap '' TERM; touch ", marker, "; while :; do sleep 1; done"))).ok());
  ASSERT_TRUE(rec.WaitFor([&](auto&) { return access(marker.c_str(), F_OK) == 0; }));
  const absl::Time t0 = absl::Now();
  sup.Stop({"stubborn"}, absl::Milliseconds(300));
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(300));
  const auto events = rec.events();
  ASSERT_EQ(Count(events, SupervisorEvent::kStopped, "stubborn"), 1);
  for (const auto& e : events) {
    if (e.kind == SupervisorEvent::kStopped) {
      EXPECT_EQ(e.detail, "signal 9 (Killed)");
    }
  }
}

TEST(SupervisorTest, ChildSeesItsEnvironmentOverTheInheritedOne) {
  std::mt19937 rng(std::random_device{}());
  const std::string value = absl::StrCat("gpu-", std::uniform_int_distribution<int>(1, 1 << 20)(rng));
  setenv("KR_SUPERVISOR_TEST_INHERITED", "kept", 1);
  setenv("KR_SUPERVISOR_TEST_VALUE", "replaced", 1);
  Recorder rec;
  Supervisor sup(RestartPolicy{}, [&](const SupervisorEvent& e) { rec.Add(e); });
  ChildSpec spec = Shell("env", "echo \"value=$KR_SUPERVISOR_TEST_VALUE inherited=$KR_SUPERVISOR_TEST_INHERITED\"; sleep 30");
  spec.env = {"KR_SUPERVISOR_TEST_VALUE=" + value};
  ASSERT_TRUE(sup.Start(spec).ok());
  const std::string want = absl::StrCat("value=", value, " inherited=kept\n");
  ASSERT_TRUE(rec.WaitFor([&](auto&) { return ReadFile(spec.log_path).find(want) != std::string::npos; }))
      << ReadFile(spec.log_path);
  sup.StopAll(absl::Seconds(5));
  EXPECT_EQ(ReadFile(spec.log_path).find("replaced"), std::string::npos);
}

TEST(SupervisorTest, MissingExecutableExits127AndDuplicateNamesAreRefused) {
  Recorder rec;
  RestartPolicy policy;
  policy.initial_backoff = absl::Milliseconds(10);
  policy.max_quick_failures = 2;
  Supervisor sup(policy, [&](const SupervisorEvent& e) { rec.Add(e); });
  ChildSpec spec{"ghost", {"/nonexistent/kernelrl-binary"}, TmpPath("ghost.log")};
  ASSERT_TRUE(sup.Start(spec).ok());
  EXPECT_EQ(sup.Start(spec).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(rec.WaitFor([](auto& ev) { return Count(ev, SupervisorEvent::kGaveUp, "ghost") == 1; }));
  for (const auto& e : rec.events()) {
    if (e.kind == SupervisorEvent::kExited) {
      EXPECT_EQ(e.detail, "exit 127");
    }
  }
  EXPECT_NE(ReadFile(TmpPath("ghost.log")).find("exec /nonexistent/kernelrl-binary failed"), std::string::npos);
}

}  // namespace
}  // namespace kernelrl::up
