#include "common/gpu_lease.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace kernelrl {
namespace {

std::string LeasePath() {
  const char* dir = std::getenv("TEST_TMPDIR");
  static int n = 0;
  return std::string(dir != nullptr ? dir : "/tmp") + "/gpu.lease." + std::to_string(::getpid()) + "." +
         std::to_string(n++);
}

// Whether `path` could be locked in `op` right now (a probe on its own
// descriptor, never blocking).
bool Free(const std::string& path, int op) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  EXPECT_GE(fd, 0);
  const bool ok = ::flock(fd, op | LOCK_NB) == 0;
  ::close(fd);
  return ok;
}

// Whether some flock(2) request waits on `path` now (/proc/locks lists blocked
// requests as "-> FLOCK ... <maj>:<min>:<inode> ...").
bool SomeoneBlockedOn(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  std::ifstream locks("/proc/locks");
  const std::string inode = ":" + std::to_string(st.st_ino) + " ";
  for (std::string line; std::getline(locks, line);) {
    if (line.find("-> FLOCK") != std::string::npos && line.find(inode) != std::string::npos) return true;
  }
  return false;
}

TEST(GpuLeaseTest, DisabledGrantsAtOnceAndHoldsNothing) {
  GpuLease lease("");
  EXPECT_FALSE(lease.enabled());
  auto a = lease.Exclusive();
  auto b = lease.Exclusive();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE(a->held());
}

TEST(GpuLeaseTest, ExclusiveKeepsSharedOutUntilReleased) {
  GpuLease lease(LeasePath());
  auto ex = lease.Exclusive();
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_TRUE(ex->held());
  EXPECT_FALSE(Free(lease.path(), LOCK_SH));
  EXPECT_TRUE(Free(lease.path() + ".turn", LOCK_EX));  // Only held while waiting.
  ex->Release();
  EXPECT_TRUE(Free(lease.path(), LOCK_EX));
}

TEST(GpuLeaseTest, SharedHoldersCoexistAndKeepExclusiveOut) {
  GpuLease lease(LeasePath());
  auto a = lease.Shared();
  auto b = lease.Shared();  // Would block forever if shared holds excluded each other.
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(Free(lease.path(), LOCK_SH));
  EXPECT_FALSE(Free(lease.path(), LOCK_EX));
  a->Release();
  EXPECT_FALSE(Free(lease.path(), LOCK_EX));
  b->Release();
  EXPECT_TRUE(Free(lease.path(), LOCK_EX));
}

TEST(GpuLeaseTest, WaitingExclusiveIsNotStarvedByNewSharedHolds) {
  GpuLease lease(LeasePath());
  auto shared = lease.Shared();
  ASSERT_TRUE(shared.ok());
  std::atomic<bool> granted{false};
  absl::Notification done;
  std::thread taker([&] {
    auto ex = lease.Exclusive();
    EXPECT_TRUE(ex.ok()) << ex.status();
    granted = true;
    done.Notify();
  });
  // The taker holds the turn while it waits for the shared holder.
  while (Free(lease.path() + ".turn", LOCK_EX)) std::this_thread::yield();
  EXPECT_FALSE(granted.load());
  // A new shared taker would queue behind it, not overtake it.
  EXPECT_FALSE(Free(lease.path() + ".turn", LOCK_EX));
  shared->Release();
  done.WaitForNotification();
  taker.join();
  EXPECT_TRUE(granted.load());
}

TEST(GpuLeaseTest, AnExclusiveWaitHasADeadlineAndLeavesTheTurnFree) {
  GpuLease lease(LeasePath());
  auto shared = lease.Shared();
  ASSERT_TRUE(shared.ok());
  auto ex = lease.Exclusive(absl::Milliseconds(20));
  EXPECT_EQ(ex.status().code(), absl::StatusCode::kDeadlineExceeded) << ex.status();
  EXPECT_TRUE(Free(lease.path() + ".turn", LOCK_EX));  // Shared takers are not held back after it.
  auto again = lease.Shared();
  ASSERT_TRUE(again.ok());
  shared->Release();
  again->Release();
  auto now = lease.Exclusive(absl::Seconds(30));
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_TRUE(now->held());
}

// A child process granted the lease (exclusively or shared) that waits to be killed holding it;
// -1 if it was not granted.
pid_t ChildHoldingTheLease(const GpuLease& lease, bool exclusive) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t child = ::fork();
  if (child == 0) {
    auto hold = exclusive ? lease.Exclusive() : lease.Shared();
    const char c = hold.ok() ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    ::pause();  // Killed while holding it.
    ::_exit(0);
  }
  char c = 0;
  const bool granted = child > 0 && ::read(ready[0], &c, 1) == 1 && c == 'y';
  ::close(ready[0]);
  ::close(ready[1]);
  if (child > 0 && !granted) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
  return granted ? child : -1;
}

void KillHolder(pid_t child) {
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

TEST(GpuLeaseTest, AHolderThatDiesFreesTheGpu) {
  GpuLease lease(LeasePath());
  const pid_t child = ChildHoldingTheLease(lease, /*exclusive=*/true);
  ASSERT_GT(child, 0);
  EXPECT_FALSE(Free(lease.path(), LOCK_SH));
  KillHolder(child);
  auto again = lease.Exclusive();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->held());
}

TEST(GpuLeaseTest, QuietSinceTheLastSharedReleaseAndExclusiveHoldsStampNothing) {
  GpuLease lease(LeasePath());
  { auto ex = lease.Exclusive(); ASSERT_TRUE(ex.ok()); }
  EXPECT_EQ(lease.SharedQuietSince(absl::Now()), absl::InfinitePast());  // No shared hold yet.

  auto a = lease.Shared();
  auto b = lease.Shared();
  ASSERT_TRUE(a.ok() && b.ok());
  a->Release();
  const absl::Time before = absl::Now();
  b->Release();  // The last of them to let go.
  const absl::Time after = absl::Now();
  auto ex = lease.Exclusive();
  ASSERT_TRUE(ex.ok());
  const absl::Time granted = absl::Now();
  const absl::Time quiet = lease.SharedQuietSince(granted);
  EXPECT_GE(quiet, before);
  EXPECT_LE(quiet, after);
  // Never later than the grant, whatever the stamp says.
  EXPECT_EQ(lease.SharedQuietSince(quiet - absl::Seconds(1)), quiet - absl::Seconds(1));
}

TEST(GpuLeaseTest, ASharedHolderThatDiesHoldingItLeavesTheGrantAsQuietSince) {
  GpuLease lease(LeasePath());
  { auto s = lease.Shared(); ASSERT_TRUE(s.ok()); }  // An earlier release, older than what follows.
  const pid_t child = ChildHoldingTheLease(lease, /*exclusive=*/false);
  ASSERT_GT(child, 0);
  KillHolder(child);  // In its step: no release stamp.
  auto ex = lease.Exclusive();
  ASSERT_TRUE(ex.ok()) << ex.status();
  const absl::Time granted = absl::Now();
  EXPECT_EQ(lease.SharedQuietSince(granted), granted);
}

// The learner is always about to step, so it is usually blocked on the lease
// when a profiling job queues behind another: flock wakes it first at the
// release, and a step of its own between the two jobs would make the second
// wait out the driver's sample lag again. It must let the queued job go first.
TEST(GpuLeaseTest, ASharedTakerAlreadyWaitingLetsAQueuedExclusiveOneGoFirst) {
  const absl::Duration kLong = absl::Seconds(60);
  GpuLease lease(LeasePath());
  { auto step = lease.Shared(); ASSERT_TRUE(step.ok()); }  // The learner's last step before the first job.
  const absl::Time learner_released = lease.SharedQuietSince(absl::InfiniteFuture());
  auto first = lease.Exclusive();
  ASSERT_TRUE(first.ok()) << first.status();

  absl::Notification learner_in, second_in, second_done;
  absl::Time second_quiet = absl::InfinitePast();
  std::thread learner([&] {
    auto step = lease.Shared();
    EXPECT_TRUE(step.ok()) << step.status();
    learner_in.Notify();
  });
  const absl::Time give_up = absl::Now() + kLong;
  while (!SomeoneBlockedOn(lease.path()) && absl::Now() < give_up) std::this_thread::yield();
  ASSERT_TRUE(SomeoneBlockedOn(lease.path())) << "the learner never waited on the lease itself";

  std::thread second([&] {
    auto ex = lease.Exclusive(kLong);
    EXPECT_TRUE(ex.ok()) << ex.status();
    second_quiet = lease.SharedQuietSince(absl::Now());
    second_in.Notify();
    EXPECT_TRUE(second_done.WaitForNotificationWithTimeout(kLong));
  });
  while (Free(lease.path() + ".turn", LOCK_EX)) std::this_thread::yield();  // The second is queued.
  first->Release();

  ASSERT_TRUE(second_in.WaitForNotificationWithTimeout(kLong)) << "the learner kept the lease from the queued job";
  EXPECT_FALSE(learner_in.HasBeenNotified()) << "the learner stepped while the second held the lease";
  EXPECT_EQ(second_quiet, learner_released) << "the learner stepped between the two jobs";
  second_done.Notify();
  second.join();
  EXPECT_TRUE(learner_in.WaitForNotificationWithTimeout(kLong));
  learner.join();
  EXPECT_GT(lease.SharedQuietSince(absl::InfiniteFuture()), learner_released);  // Its step afterwards counts.
}

TEST(GpuLeaseTest, AnUnopenablePathIsAnError) {
  GpuLease lease("/nonexistent-dir-for-gpu-lease/x");
  auto s = lease.Shared();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace kernelrl
