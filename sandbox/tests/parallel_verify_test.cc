// VerifyLimits.parallel_verify_jobs on the CPU backend: verify-only jobs share
// the worker's GPU turn (each on its own zygote); a job that profiles verifies
// beside them and has the GPU alone from its clock on (sandbox/gpu_turns.h).
// Synchronised on the Evaluator's own progress events: a job's ("gpu_queue",
// finished) note comes while it holds its turn, ("gpu_alone", false) when it
// asks for its clock and ("gpu_alone", true) once it has the GPU alone; blocking
// in a note keeps what it holds held.
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "sandbox/evaluator.h"
#include "sandbox/tests/e2e_util.h"

namespace kernelrl::sandbox {
namespace {

constexpr char kRelu[] = "sandbox/testdata/cpu_tasks/relu.py";
constexpr char kSolution[] = "sandbox/solutions/cpu/relu";

// Who holds a turn now, and the most that ever did at once.
struct Turns {
  absl::Mutex mu;
  int inside = 0, most = 0;
  void Enter() {
    absl::MutexLock l(&mu);
    most = std::max(most, ++inside);
  }
  void Leave() {
    absl::MutexLock l(&mu);
    --inside;
  }
};

class ParallelVerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    python_ = testing::FindTorchPython();
    if (python_.empty()) GTEST_SKIP() << "no python3 with torch on this machine";
    SandboxConfig c = testing::CpuConfig(python_);
    c.set_enable_profiling(true);  // no baselines: a profiled job is "correct, not benchmarked"
    c.set_baseline_dir(c.work_root() + "-baselines");
    c.mutable_verify()->set_wall_seconds(60);
    c.mutable_verify()->set_parallel_verify_jobs(2);
    c.mutable_profiler()->set_time_budget_s(0.3);
    c.mutable_profiler()->set_anchor_drift_tolerance(1e9);  // the timing is not under test
    auto e = Evaluator::Create(c);
    ASSERT_TRUE(e.ok()) << e.status();
    evaluator_ = *std::move(e);
  }
  EvaluateRequest Request(bool profile) {
    EvaluateRequest r = testing::Request(kRelu, kSolution);
    r.set_skip_profile(!profile);
    return r;
  }
  // A profiling job that, holding its clock token, waits in its ("start_queue", finished) note
  // until `release`; `profiled` (may be null) turns true at its ("profile", finished) note, the
  // last it gives while it holds its turn.
  std::thread HoldStartedProfilingJob(Verdict* out, absl::Notification* started, absl::Notification* release,
                                      std::atomic<bool>* profiled = nullptr) {
    return std::thread([=] {
      *out = evaluator_->Evaluate(Request(true), [=](const std::string& stage, bool finished, const std::string&) {
        if (stage == "profile" && finished && profiled != nullptr) *profiled = true;
        if (stage != "start_queue" || !finished) return;
        started->Notify();
        release->WaitForNotificationWithTimeout(absl::Seconds(120));
      });
    });
  }
  std::string python_;
  std::unique_ptr<Evaluator> evaluator_;
};

TEST_F(ParallelVerifyTest, VerifyOnlyJobsShareTheGpuAndAClockRunsAlone) {
  Turns turns;
  // Two verify-only jobs: each holds its turn until the other has one too.
  absl::Notification both;
  std::atomic<int> arrived{0};
  auto verify_only = [&](Verdict* out) {
    *out = evaluator_->Evaluate(Request(false), [&](const std::string& stage, bool finished, const std::string&) {
      if (stage != "gpu_queue" || !finished) return;
      turns.Enter();
      if (++arrived == 2) both.Notify();
      both.WaitForNotificationWithTimeout(absl::Seconds(120));  // serialised: the other never arrives
      turns.Leave();
    });
  };
  Verdict a, b;
  std::thread ta(verify_only, &a), tb(verify_only, &b);
  ta.join(), tb.join();
  EXPECT_TRUE(both.HasBeenNotified()) << "the second verify-only job never got a turn while the first held one";
  EXPECT_EQ(turns.most, 2);
  EXPECT_EQ(a.outcome(), Verdict::OK) << a.summary();
  EXPECT_EQ(b.outcome(), Verdict::OK) << b.summary();

  // A verify-only job holds its turn; a profiled job verifies meanwhile, then asks for its clock
  // and must not get it until the first lets go.
  absl::Notification holding, release, profiled_in, asking, granted;
  std::atomic<bool> overlap{false};
  std::string profiled_detail;
  Verdict held, timed;
  std::thread th([&] {
    held = evaluator_->Evaluate(Request(false), [&](const std::string& stage, bool finished, const std::string&) {
      if (stage != "gpu_queue" || !finished) return;
      turns.Enter();
      holding.Notify();
      release.WaitForNotificationWithTimeout(absl::Seconds(120));
      turns.Leave();
    });
  });
  holding.WaitForNotification();
  std::thread tp([&] {
    timed = evaluator_->Evaluate(Request(true), [&](const std::string& stage, bool finished, const std::string& detail) {
      if (stage == "gpu_queue" && finished) {
        profiled_detail = detail;
        profiled_in.Notify();
      }
      if (stage != "gpu_alone") return;
      if (!finished) {
        asking.Notify();
        return;
      }
      absl::MutexLock l(&turns.mu);
      overlap = turns.inside > 0;
      granted.Notify();
    });
  });
  EXPECT_TRUE(profiled_in.WaitForNotificationWithTimeout(absl::Seconds(120)))
      << "the profiled job's verify waited for the verify-only job to end";
  EXPECT_EQ(profiled_detail, "the GPU shared until the clock");
  EXPECT_TRUE(asking.WaitForNotificationWithTimeout(absl::Seconds(120))) << "the profiled job never asked for its clock";
  // Absence of an event: a clock that did not wait would start now.
  EXPECT_FALSE(granted.WaitForNotificationWithTimeout(absl::Seconds(2)));
  release.Notify();
  th.join(), tp.join();
  EXPECT_FALSE(overlap.load()) << "the profiled job's clock started while a verify-only job held the GPU";
  EXPECT_TRUE(granted.HasBeenNotified());
  EXPECT_EQ(held.outcome(), Verdict::OK) << held.summary();
  EXPECT_EQ(timed.outcome(), Verdict::OK) << timed.summary();
  EXPECT_EQ(timed.reward(), 1) << timed.summary();  // no baseline: correct, not benchmarked
}

// Two profiling jobs start their processes together (CUDA, the task: our code), and the second's
// candidate imports its code only once the first has ended: its ("start_queue", true) note comes
// after the first job's ("profile", true), its last note while it holds its turn.
TEST_F(ParallelVerifyTest, ProfilingJobsStartTogetherAndTakeTheirTurnsOneAtATime) {
  absl::Notification first_started, release, second_in, second_asking, second_started;
  std::atomic<bool> first_over{false}, started_early{false};
  Verdict first, second;
  std::thread ta = HoldStartedProfilingJob(&first, &first_started, &release, &first_over);
  ASSERT_TRUE(first_started.WaitForNotificationWithTimeout(absl::Seconds(120)));
  std::thread tb([&] {
    second = evaluator_->Evaluate(Request(true), [&](const std::string& stage, bool finished, const std::string&) {
      if (stage == "gpu_queue" && finished) second_in.Notify();
      if (stage != "start_queue") return;
      if (!finished) {
        second_asking.Notify();
        return;
      }
      started_early = !first_over.load();
      second_started.Notify();
    });
  });
  EXPECT_TRUE(second_in.WaitForNotificationWithTimeout(absl::Seconds(120)))
      << "the second profiling job started no process while the first held its turn";
  EXPECT_TRUE(second_asking.WaitForNotificationWithTimeout(absl::Seconds(120)));
  // Absence of an event: a start that did not wait would come now.
  EXPECT_FALSE(second_started.WaitForNotificationWithTimeout(absl::Seconds(2)));
  release.Notify();
  ta.join(), tb.join();
  EXPECT_FALSE(started_early.load()) << "the second job's candidate imported its code while the first job ran";
  EXPECT_EQ(first.outcome(), Verdict::OK) << first.summary();
  EXPECT_EQ(second.outcome(), Verdict::OK) << second.summary();
}

// More jobs than zygotes: two profiling jobs hold both zygotes, one holding the clock token, the
// other waiting for it, while a verify-only job waits for a zygote. The clock waits for every
// shared turn to end, so a job waiting for a zygote must hold none (else: a deadlock, until the
// waiting start gives up and its verdict is INFRA_ERROR).
TEST_F(ParallelVerifyTest, JobsWaitingForAZygoteHoldNoTurn) {
  absl::Notification first_started, release, second_asking, third_queued;
  Verdict first, second, third;
  std::thread ta = HoldStartedProfilingJob(&first, &first_started, &release);
  ASSERT_TRUE(first_started.WaitForNotificationWithTimeout(absl::Seconds(120)));
  std::thread tb([&] {
    second = evaluator_->Evaluate(Request(true), [&](const std::string& stage, bool finished, const std::string&) {
      if (stage == "start_queue" && !finished) second_asking.Notify();
    });
  });
  ASSERT_TRUE(second_asking.WaitForNotificationWithTimeout(absl::Seconds(120)));
  std::thread tc([&] {
    third = evaluator_->Evaluate(Request(false), [&](const std::string& stage, bool finished, const std::string&) {
      if (stage == "verify" && !finished) third_queued.Notify();  // "queue position N": about to wait
    });
  });
  ASSERT_TRUE(third_queued.WaitForNotificationWithTimeout(absl::Seconds(120)));
  release.Notify();
  ta.join(), tb.join(), tc.join();
  EXPECT_EQ(first.outcome(), Verdict::OK) << first.summary();
  EXPECT_EQ(second.outcome(), Verdict::OK) << second.summary();
  EXPECT_EQ(third.outcome(), Verdict::OK) << third.summary();
}

// A verdict that needs no GPU (here a workspace without model_new.py) comes back while a profiled
// job's clock holds the GPU alone: finishing a verdict waits for no GPU turn.
TEST_F(ParallelVerifyTest, AVerdictThatNeedsNoGpuIsNotHeldBehindAProfiledJob) {
  absl::Notification holding, release;
  Verdict timed;
  std::thread tp([&] {
    timed = evaluator_->Evaluate(Request(true), [&](const std::string& stage, bool finished, const std::string&) {
      if (stage != "gpu_alone" || !finished) return;
      holding.Notify();
      release.WaitForNotificationWithTimeout(absl::Seconds(120));
    });
  });
  holding.WaitForNotification();
  EvaluateRequest broken = Request(false);
  auto& files = *broken.mutable_workspace()->mutable_files();
  files.erase(std::remove_if(files.begin(), files.end(), [](const auto& f) { return f.path() == "model_new.py"; }),
              files.end());
  absl::Notification rejected_done;
  Verdict rejected;
  std::thread tr([&] {
    rejected = evaluator_->Evaluate(broken);
    rejected_done.Notify();
  });
  // Its own deadline only bounds a failure: a held verdict would wait for the release below.
  const bool back_while_held = rejected_done.WaitForNotificationWithTimeout(absl::Seconds(60));
  release.Notify();
  tr.join(), tp.join();
  EXPECT_TRUE(back_while_held) << "a verdict that never reaches the GPU waited for the profiled job's turn";
  EXPECT_NE(rejected.outcome(), Verdict::OK) << rejected.summary();
  EXPECT_EQ(timed.outcome(), Verdict::OK) << timed.summary();
}

bool HasStage(const Verdict& v, const std::string& stage) {
  return std::any_of(v.stages().begin(), v.stages().end(), [&](const StageTiming& s) { return s.stage() == stage; });
}

// A request whose caller has gone (its RPC cancelled) uses no more of the worker: it ends before
// its compile, never cached.
TEST_F(ParallelVerifyTest, AJobWhoseCallerHasGoneEndsBeforeItsCompile) {
  const Verdict v = evaluator_->Evaluate(Request(true), nullptr, [] { return true; });
  EXPECT_EQ(v.outcome(), Verdict::INFRA_ERROR) << v.summary();
  EXPECT_EQ(v.summary(), std::string(kCallerGone) + "compile stage");
  EXPECT_FALSE(HasStage(v, "compile"));
  EXPECT_FALSE(HasStage(v, "gpu_queue"));
}

// A profiling job queued behind another's clock token, whose caller goes away while it waits (as a
// cancelled job's rollouts do when their actors stop), gives up its turn without profiling: the
// next job gets the GPU at once instead of after a profile nobody reads.
TEST_F(ParallelVerifyTest, AProfilingJobWhoseCallerWentAwayInTheQueueNeverProfiles) {
  absl::Notification first_started, release, second_asking;
  std::atomic<bool> second_profiled{false};
  Verdict first, second;
  std::thread ta = HoldStartedProfilingJob(&first, &first_started, &release);
  ASSERT_TRUE(first_started.WaitForNotificationWithTimeout(absl::Seconds(120)));
  // Its caller goes away when the first job is released: while it waits for the token, or (if the
  // release comes first) just before it asks for it. Either way it must not profile.
  std::thread tb([&] {
    second = evaluator_->Evaluate(
        Request(true),
        [&](const std::string& stage, bool finished, const std::string&) {
          if (stage == "start_queue" && !finished) second_asking.Notify();
          if (stage == "profile") second_profiled = true;
        },
        [&] { return release.HasBeenNotified(); });
  });
  ASSERT_TRUE(second_asking.WaitForNotificationWithTimeout(absl::Seconds(120)));
  release.Notify();
  ta.join(), tb.join();
  EXPECT_EQ(first.outcome(), Verdict::OK) << first.summary();
  EXPECT_EQ(second.outcome(), Verdict::INFRA_ERROR) << second.summary();
  EXPECT_EQ(second.summary(), std::string(kCallerGone) + "profile stage");
  EXPECT_FALSE(second_profiled.load()) << "the abandoned job ran its profile";
  EXPECT_FALSE(HasStage(second, "profile"));
}

}  // namespace
}  // namespace kernelrl::sandbox
