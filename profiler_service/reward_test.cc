#include "profiler_service/reward.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace kernelrl {
namespace {

TEST(MilestoneReward, IncorrectIsMinusOneWhateverTheSpeed) {
  EXPECT_EQ(MilestoneReward(false, 100.0, 100.0), -1.0);
  EXPECT_EQ(MilestoneReward(false, 0.5, 0.5), -1.0);
  EXPECT_EQ(MilestoneReward(false, 0.0, 0.0), -1.0);
}

TEST(MilestoneReward, BothBaselinesBeatenIsThree) {
  EXPECT_EQ(MilestoneReward(true, 1.06, 1.06), 3.0);
  EXPECT_EQ(MilestoneReward(true, 4.0, 1.2), 3.0);
}

TEST(MilestoneReward, EagerOnlyIsTwo) {
  EXPECT_EQ(MilestoneReward(true, 1.2, 1.0), 2.0);
  EXPECT_EQ(MilestoneReward(true, 1.2, 0.3), 2.0);
}

TEST(MilestoneReward, CompileOnlyOrNeitherIsOne) {
  // The paper's tier 2 is "faster than eager only": beating compile alone earns 1.
  EXPECT_EQ(MilestoneReward(true, 1.0, 1.5), 1.0);
  EXPECT_EQ(MilestoneReward(true, 0.9, 0.9), 1.0);
}

TEST(MilestoneReward, ExactlyFivePercentIsNotMoreThanFivePercent) {
  // Boundary: 1.05 earns nothing extra; the next representable value above does.
  const double above = std::nextafter(1.05, 2.0);
  const double below = std::nextafter(1.05, 0.0);
  EXPECT_EQ(MilestoneReward(true, 1.05, 1.05), 1.0);
  EXPECT_EQ(MilestoneReward(true, below, above), 1.0);
  EXPECT_EQ(MilestoneReward(true, above, 1.05), 2.0);
  EXPECT_EQ(MilestoneReward(true, above, above), 3.0);
  EXPECT_EQ(MilestoneReward(true, 1.0501, 1.0499), 2.0);
}

TEST(MilestoneReward, BoundaryFollowsTheConfiguredMargin) {
  EXPECT_EQ(MilestoneReward(true, 1.15, 1.15, 0.10), 3.0);
  EXPECT_EQ(MilestoneReward(true, 1.10, 1.10, 0.10), 1.0);
  EXPECT_EQ(MilestoneReward(true, 1.01, 1.01, 0.0), 3.0);
  EXPECT_EQ(MilestoneReward(true, 1.0, 1.0, 0.0), 1.0);
}

TEST(MilestoneReward, UnprofiledOrBrokenSpeedupsNeverCountAsFaster) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(MilestoneReward(true, 0.0, 0.0), 1.0);
  EXPECT_EQ(MilestoneReward(true, nan, 2.0), 1.0);
  EXPECT_EQ(MilestoneReward(true, inf, inf), 1.0);
  EXPECT_EQ(MilestoneReward(true, -3.0, -3.0), 1.0);
  EXPECT_EQ(MilestoneReward(true, 2.0, nan), 2.0);
}

}  // namespace
}  // namespace kernelrl
