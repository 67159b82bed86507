// GpuTurns: which jobs may hold the worker's GPU together. Each "must wait"
// case gives the other thread 200 ms to get in where it must not: a correct
// rule passes whatever the load, a broken one is caught unless the machine
// stalls that thread for the whole window.
#include "sandbox/gpu_turns.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/gpu_lease.h"
#include "gtest/gtest.h"

namespace kernelrl::sandbox {
namespace {

using Kind = GpuTurns::Kind;
constexpr absl::Duration kLong = absl::Seconds(60);   // what must happen
constexpr absl::Duration kWindow = absl::Milliseconds(200);  // what must not

// Two turns of these kinds hold the GPU at once: each waits inside for the other.
void ExpectTogether(Kind a, Kind b) {
  GpuTurns turns;
  absl::Notification a_in, b_in;
  std::thread t([&] {
    GpuTurns::Turn turn(&turns, b);
    b_in.Notify();
    EXPECT_TRUE(a_in.WaitForNotificationWithTimeout(kLong));
  });
  {
    GpuTurns::Turn turn(&turns, a);
    a_in.Notify();
    EXPECT_TRUE(b_in.WaitForNotificationWithTimeout(kLong)) << "the second turn waited for the first to end";
  }
  t.join();
}

TEST(GpuTurnsTest, VerifyOnlyJobsShareTheGpu) { ExpectTogether(Kind::kShared, Kind::kShared); }

TEST(GpuTurnsTest, AProfilingJobVerifiesBesideVerifyOnlyJobs) { ExpectTogether(Kind::kClocked, Kind::kShared); }

// Before their starts (their CUDA start and the task, our code only), two profiling jobs run together.
TEST(GpuTurnsTest, ProfilingJobsStartTheirProcessesTogether) { ExpectTogether(Kind::kClocked, Kind::kClocked); }

TEST(GpuTurnsTest, TheClockWaitsForEverySharedTurnToEnd) {
  GpuTurns turns;
  absl::Notification shared_in, asking, alone;
  std::atomic<bool> shared_ended{false};
  std::thread clocked([&] {
    GpuTurns::Turn turn(&turns, Kind::kClocked);
    ASSERT_TRUE(turn.Start(kLong));
    ASSERT_TRUE(shared_in.WaitForNotificationWithTimeout(kLong));
    asking.Notify();
    turn.Alone();
    EXPECT_TRUE(shared_ended.load()) << "the clock's turn began while a verify-only job held the GPU";
    EXPECT_TRUE(turn.alone());
    alone.Notify();
  });
  {
    GpuTurns::Turn turn(&turns, Kind::kShared);
    shared_in.Notify();
    ASSERT_TRUE(asking.WaitForNotificationWithTimeout(kLong));
    EXPECT_FALSE(alone.WaitForNotificationWithTimeout(kWindow)) << "alone beside a shared turn";
    shared_ended = true;
  }
  clocked.join();
}

// A shared turn asked for while the turn `hold` makes has the GPU alone starts only once that one
// has ended.
void ExpectSharedTurnsWaitFor(const std::function<std::unique_ptr<GpuTurns::Turn>(GpuTurns*)>& hold) {
  GpuTurns turns;
  absl::Notification shared_in;
  std::atomic<bool> over{false};
  std::thread shared;
  {
    std::unique_ptr<GpuTurns::Turn> turn = hold(&turns);
    ASSERT_TRUE(turn->alone());
    shared = std::thread([&] {
      GpuTurns::Turn t(&turns, Kind::kShared);
      EXPECT_TRUE(over.load()) << "a verify-only job started while another job had the GPU alone";
      shared_in.Notify();
    });
    EXPECT_FALSE(shared_in.WaitForNotificationWithTimeout(kWindow));
    over = true;
  }
  EXPECT_TRUE(shared_in.WaitForNotificationWithTimeout(kLong));
  shared.join();
}

TEST(GpuTurnsTest, NoSharedTurnStartsWhileAClockRuns) {
  ExpectSharedTurnsWaitFor([](GpuTurns* turns) {
    auto turn = std::make_unique<GpuTurns::Turn>(turns, Kind::kClocked);
    EXPECT_TRUE(turn->Start(kLong));
    turn->Alone();
    return turn;
  });
}

TEST(GpuTurnsTest, AnAloneTurnHasTheGpuFromItsStart) {
  ExpectSharedTurnsWaitFor([](GpuTurns* turns) {
    auto turn = std::make_unique<GpuTurns::Turn>(turns, Kind::kAlone);
    turn->Alone();  // a no-op
    return turn;
  });
}

TEST(GpuTurnsTest, OneProfilingJobAtATimeFromItsStart) {
  // The second imports nothing until the first has ended: its candidate's code would otherwise
  // be alive while the first one's clock runs.
  GpuTurns turns;
  absl::Notification second_in, second_asking;
  std::atomic<bool> first_over{false};
  std::thread second;
  {
    GpuTurns::Turn turn(&turns, Kind::kClocked);
    ASSERT_TRUE(turn.Start(kLong));
    second = std::thread([&] {
      GpuTurns::Turn t(&turns, Kind::kClocked);
      second_asking.Notify();
      EXPECT_TRUE(t.Start(kLong));
      EXPECT_TRUE(first_over.load()) << "two profiling jobs started at once";
      second_in.Notify();
    });
    ASSERT_TRUE(second_asking.WaitForNotificationWithTimeout(kLong));
    EXPECT_FALSE(second_in.WaitForNotificationWithTimeout(kWindow));
    turn.Alone();  // the first's clock: the second waits for its start without a shared turn
    first_over = true;
  }
  EXPECT_TRUE(second_in.WaitForNotificationWithTimeout(kLong));
  second.join();
}

TEST(GpuTurnsTest, AStartGivesUpAfterItsWait) {
  GpuTurns turns;
  GpuTurns::Turn first(&turns, Kind::kClocked);
  ASSERT_TRUE(first.Start(kLong));
  std::thread second([&] {
    GpuTurns::Turn t(&turns, Kind::kClocked);
    EXPECT_FALSE(t.Start(absl::Milliseconds(20))) << "started while another profiling job held the token";
    EXPECT_FALSE(t.alone());
  });
  second.join();  // it gave up while the first still holds the token
  first.Alone();  // the second's shared hold came back and went with it (else this waits forever)
  EXPECT_TRUE(first.alone());
}

// As the evaluator starts a profiling job: the GPU lease (common/gpu_lease.h) in Start's `first`,
// then the token. A job queued behind another waits for the lease holding the lease's turn file,
// so it takes the lease straight from that job: a learner asking for a step meanwhile gets none
// in between, and the queued job's quiet-since is the learner's release from before the first
// job (nothing for its clock to wait out, ProfilerConfig.gpu_lease_sample_lag_s). The first job's
// clock (Alone) is not held up by the queued one, which waits with no shared turn.
TEST(GpuTurnsTest, AQueuedProfilingJobTakesTheLeaseStraightFromTheOneBeforeIt) {
  const GpuLease lease(absl::StrCat(std::getenv("TEST_TMPDIR"), "/gpu.lease"));
  auto start = [&](GpuTurns::Turn& turn, GpuLease::Hold* hold) {
    return turn.Start(kLong, [&] {
      absl::StatusOr<GpuLease::Hold> held = lease.Exclusive(kLong);
      EXPECT_TRUE(held.ok()) << held.status();
      if (held.ok()) *hold = *std::move(held);
      return held.ok();
    });
  };
  auto turn_file_held = [&] {
    const int fd = ::open((lease.path() + ".turn").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    const bool free = fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (fd >= 0) ::close(fd);
    return !free;
  };
  {
    absl::StatusOr<GpuLease::Hold> step = lease.Shared();  // the learner's step before the first job
    ASSERT_TRUE(step.ok()) << step.status();
  }
  const absl::Time learner_released = lease.SharedQuietSince(absl::InfiniteFuture());
  ASSERT_NE(learner_released, absl::InfinitePast());

  GpuTurns turns;
  GpuLease::Hold first_lease, second_lease;
  absl::Notification second_in, learner_in, second_done;
  absl::Time second_quiet = absl::InfinitePast();
  std::thread second, learner;
  // A failed ASSERT returns with the threads still running: they end on their own waits.
  struct Joiner {
    std::thread* t;
    ~Joiner() {
      if (t->joinable()) t->join();
    }
  } join_second{&second}, join_learner{&learner};
  {
    GpuTurns::Turn first(&turns, Kind::kClocked);
    ASSERT_TRUE(start(first, &first_lease));
    second = std::thread([&] {
      GpuTurns::Turn t(&turns, Kind::kClocked);
      EXPECT_TRUE(start(t, &second_lease));
      second_quiet = lease.SharedQuietSince(absl::Now());
      second_in.Notify();
      EXPECT_TRUE(second_done.WaitForNotificationWithTimeout(kLong));
      second_lease.Release();
    });
    // The second waits for the lease (holding its turn file) while the first holds it.
    const absl::Time give_up = absl::Now() + kLong;
    while (!turn_file_held() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
    ASSERT_TRUE(turn_file_held()) << "the queued job does not wait for the lease before its token";
    learner = std::thread([&] {
      absl::StatusOr<GpuLease::Hold> step = lease.Shared();
      EXPECT_TRUE(step.ok()) << step.status();
      learner_in.Notify();
    });
    first.Alone();  // the first's clock, beside the waiting second
    EXPECT_FALSE(second_in.WaitForNotificationWithTimeout(kWindow)) << "two profiling jobs started at once";
    first_lease.Release();
  }
  ASSERT_TRUE(second_in.WaitForNotificationWithTimeout(kLong));
  EXPECT_FALSE(learner_in.WaitForNotificationWithTimeout(kWindow)) << "the learner stepped while the second held the lease";
  EXPECT_EQ(second_quiet, learner_released) << "the learner stepped between the two jobs";
  second_done.Notify();
  EXPECT_TRUE(learner_in.WaitForNotificationWithTimeout(kLong));
}

}  // namespace
}  // namespace kernelrl::sandbox
