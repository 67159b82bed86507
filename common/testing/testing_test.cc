// The shared test helpers: fresh temporary directories are distinct and under
// TEST_TMPDIR; WaitFor returns as soon as the condition holds and gives up
// exactly when the injected clock passes the timeout.
#include "common/testing/testing.h"

#include <sys/stat.h>

#include <atomic>
#include <random>
#include <set>
#include <thread>

#include "gtest/gtest.h"

namespace kernelrl::testing {
namespace {

TEST(TempDirTest, FreshDirectoriesAreDistinctAndUnderTestTmpdir) {
  std::set<std::string> seen;
  for (int i = 0; i < 5; ++i) {
    const std::string d = NewTempDir("testing_test_");
    EXPECT_EQ(d.rfind(TempDir() + "/testing_test_", 0), 0u) << d;
    struct stat st;
    ASSERT_EQ(stat(d.c_str(), &st), 0) << d;
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_TRUE(seen.insert(d).second) << d;
  }
}

TEST(WaitForTest, ReturnsWhenTheConditionHoldsWithoutWaitingOut) {
  std::mt19937 rng(std::random_device{}());
  const int needed = 1 + static_cast<int>(rng() % 50);
  FakeClock clock;
  const absl::Time start = clock.Now();
  int polls = 0;
  EXPECT_TRUE(WaitFor([&] { return ++polls == needed; }, absl::Seconds(10), &clock, absl::Milliseconds(7)));
  EXPECT_EQ(polls, needed);
  EXPECT_EQ(clock.Now() - start, absl::Milliseconds(7) * (needed - 1));  // One poll interval between checks.
}

TEST(WaitForTest, GivesUpWhenTheClockPassesTheTimeout) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  int polls = 0;
  EXPECT_FALSE(WaitFor([&] { return ++polls < 0; }, absl::Milliseconds(100), &clock, absl::Milliseconds(10)));
  EXPECT_EQ(clock.Now() - start, absl::Milliseconds(100));
  EXPECT_EQ(polls, 11);  // At 0, 10, ..., 100 ms.
}

TEST(WaitForTest, SeesAConditionAnotherThreadSets) {
  std::atomic<bool> flag{false};
  std::thread t([&] { flag = true; });
  EXPECT_TRUE(WaitFor([&] { return flag.load(); }, absl::Seconds(60)));  // Real clock; the bound is only for failure.
  t.join();
}

TEST(ParseScrapeTest, SeriesKeepTheirLabelsAndCommentsAndBadLinesAreSkipped) {
  std::mt19937 rng(std::random_device{}());
  const double in_flight = 1 + rng() % 50, total = 0.5 + rng() % 1000;
  const std::string text = "# HELP x_in_flight RPCs.\n# TYPE x_in_flight gauge\n"
                           "x_in_flight{service=\"a b\"} " + std::to_string(in_flight) + "\n"
                           "x_total " + std::to_string(total) + "\n"
                           "no_value_here\n\n";
  const std::map<std::string, double> s = ParseScrape(text);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s.at("x_in_flight{service=\"a b\"}"), in_flight);
  EXPECT_DOUBLE_EQ(s.at("x_total"), total);
}

}  // namespace
}  // namespace kernelrl::testing
