// MemoryBudget: grants never exceed the budget, a large request waits for the
// grants out to come back and is not overtaken by later small ones, and the
// retry ladder ends with the whole budget.
#include "data/memory_budget.h"

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kernelrl {
namespace {

TEST(MemoryBudgetTest, GrantSizesAndLadder) {
  std::mt19937_64 rng(std::random_device{}());
  const int units = 3 + static_cast<int>(rng() % 10);
  const int64_t bytes = (int64_t{1} << 30) + static_cast<int64_t>(rng() % 1000);
  MemoryBudget b(units, bytes);
  EXPECT_EQ(b.UnitsForAttempt(0, 2), 1);
  EXPECT_EQ(b.UnitsForAttempt(1, 2), std::min(4, units));
  EXPECT_EQ(b.UnitsForAttempt(2, 2), units);
  EXPECT_EQ(b.UnitsForAttempt(1, 1), units);
  {
    auto g = b.Acquire(1);
    EXPECT_EQ(g.bytes(), bytes / units);
    EXPECT_EQ(b.free_units(), units - 1);
  }
  EXPECT_EQ(b.free_units(), units);
  auto all = b.Acquire(units + 5);  // Clamped: everything, to the byte.
  EXPECT_EQ(all.units(), units);
  EXPECT_EQ(all.bytes(), bytes);
  all.Release();
  EXPECT_EQ(b.free_units(), units);
  MemoryBudget unaccounted(units, 0);
  EXPECT_EQ(unaccounted.Acquire(1).bytes(), 0) << "no budget: no cap";
}

TEST(MemoryBudgetTest, ConcurrentGrantsNeverExceedTheBudget) {
  const int units = 6;
  MemoryBudget b(units, int64_t{6} << 30);
  std::atomic<int> out{0}, worst{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937 rng(1000 + t + std::random_device{}());
      for (int i = 0; i < 60; ++i) {
        const int want = b.UnitsForAttempt(static_cast<int>(rng() % 3), 2);
        auto g = b.Acquire(want);
        const int now = out += g.units();
        int w = worst.load();
        while (now > w && !worst.compare_exchange_weak(w, now)) {
        }
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
        out -= g.units();
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_LE(worst.load(), units);
  EXPECT_GT(worst.load(), 1) << "grants never overlapped: the test did not exercise sharing";
  EXPECT_EQ(b.free_units(), units);
}

TEST(MemoryBudgetTest, LargeRequestIsServedBeforeLaterSmallOnes) {
  MemoryBudget b(4, int64_t{4} << 30);
  auto held = b.Acquire(1);  // Another worker's candidate in flight.
  absl::Notification big_served;
  std::atomic<bool> small_served{false};
  std::thread big([&] {
    auto g = b.Acquire(4);  // Alone: waits for `held`.
    EXPECT_FALSE(small_served.load()) << "a later one-unit request overtook the waiting large one";
    big_served.Notify();
  });
  // Let the large request queue up before the small one.
  for (int i = 0; i < 30000 && b.waiting() == 0; ++i) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_EQ(b.waiting(), 1);
  std::thread small([&] {
    auto g = b.Acquire(1);  // Three units are free, but the large request is first.
    small_served = true;
  });
  for (int i = 0; i < 30000 && b.waiting() < 2; ++i) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(b.waiting(), 2);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(big_served.HasBeenNotified()) << "granted the whole budget while a unit was out";
  EXPECT_FALSE(small_served.load());
  held.Release();
  big.join();
  small.join();
  EXPECT_TRUE(big_served.HasBeenNotified());
  EXPECT_TRUE(small_served.load());
  EXPECT_EQ(b.free_units(), 4);
}

}  // namespace
}  // namespace kernelrl
