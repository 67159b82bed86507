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

v1::Verdict MakeVerdict(v1::Verdict::Outcome o, double x_eager, double x_compile, bool quarantined,
                        const char* flag) {
  v1::Verdict v;
  v.set_outcome(o);
  v.set_speedup_vs_eager(x_eager);
  v.set_speedup_vs_compile(x_compile);
  v.set_quarantined(quarantined);
  if (flag != nullptr) v.add_flags(flag);
  return v;
}

// RewardFor over every outcome, and for OK over each tier of speed-ups, the
// quarantine and the flags that change it. Speed-ups of non-OK verdicts are
// set high to show they never pay.
TEST(RewardFor, Table) {
  struct Row {
    v1::Verdict::Outcome outcome;
    double x_eager, x_compile;
    bool quarantined;
    const char* flag;
    double reward;
    bool trainable;
  };
  const Row rows[] = {
      {v1::Verdict::OK, 4.0, 2.0, false, nullptr, 3, true},
      {v1::Verdict::OK, 1.2, 0.8, false, nullptr, 2, true},
      {v1::Verdict::OK, 1.0, 1.5, false, nullptr, 1, true},
      {v1::Verdict::OK, 0.5, 0.5, false, nullptr, 1, true},
      {v1::Verdict::OK, 0.0, 0.0, false, "baseline_missing", 1, true},
      {v1::Verdict::OK, 4.0, 2.0, true, "side_stream", 1, true},
      {v1::Verdict::OK, 1.2, 0.8, true, "below_speed_of_light", 1, true},
      {v1::Verdict::OK, 0.5, 0.5, true, "device_drift", 1, true},
      {v1::Verdict::OK, 4.0, 2.0, false, "profile_skipped", 1, true},
      {v1::Verdict::OK, 4.0, 2.0, false, "compile_baseline_missing", 3, true},  // info only
      {v1::Verdict::OK, 1.3, 1.2, false, kUnresolvedVsEager, 1, true},    // 3 needs both, 2 needs eager
      {v1::Verdict::OK, 1.3, 1.2, false, kUnresolvedVsCompile, 2, true},  // eager still stands
      {v1::Verdict::OUTCOME_UNSPECIFIED, 4.0, 2.0, false, nullptr, -1, true},
      {v1::Verdict::COMPILE_ERROR, 4.0, 2.0, false, nullptr, -1, true},
      {v1::Verdict::WRONG_ANSWER, 4.0, 2.0, false, "recheck_failed", -1, true},
      {v1::Verdict::TIMEOUT, 4.0, 2.0, false, nullptr, -1, true},
      {v1::Verdict::CRASH, 4.0, 2.0, false, "host_memory_cap", -1, true},
      {v1::Verdict::CUDA_ERROR, 4.0, 2.0, false, nullptr, -1, true},
      {v1::Verdict::SANDBOX_VIOLATION, 4.0, 2.0, false, nullptr, -1, true},
      {v1::Verdict::HACK_DETECTED, 4.0, 2.0, true, "timing_below_outside_clock", -1, true},
      {v1::Verdict::INFRA_ERROR, 4.0, 2.0, false, nullptr, 0, false},
      {v1::Verdict::INFRA_ERROR, 0.0, 0.0, false, nullptr, 0, false},
      {v1::Verdict::BAD_WORKSPACE, 4.0, 2.0, false, nullptr, -1, true},
  };
  bool seen[v1::Verdict::Outcome_ARRAYSIZE] = {};
  for (const Row& r : rows) {
    const v1::Verdict v = MakeVerdict(r.outcome, r.x_eager, r.x_compile, r.quarantined, r.flag);
    const std::string label = v1::Verdict::Outcome_Name(r.outcome) + " " + std::to_string(r.x_eager) + "/" +
                              std::to_string(r.x_compile) + (r.quarantined ? " quarantined " : " ") +
                              (r.flag ? r.flag : "");
    EXPECT_EQ(RewardFor(v), r.reward) << label;
    EXPECT_EQ(IsTrainingSample(v), r.trainable) << label;
    seen[r.outcome] = true;
  }
  for (int o = v1::Verdict::Outcome_MIN; o <= v1::Verdict::Outcome_MAX; ++o) {
    if (v1::Verdict::Outcome_IsValid(o)) EXPECT_TRUE(seen[o]) << "no row for " << v1::Verdict::Outcome_Name(o);
  }
}

TEST(RewardFor, UsesTheConfiguredMargin) {
  const v1::Verdict v = MakeVerdict(v1::Verdict::OK, 1.08, 1.08, false, nullptr);
  EXPECT_EQ(RewardFor(v), 3.0);
  EXPECT_EQ(RewardFor(v, 0.10), 1.0);
}

}  // namespace
}  // namespace kernelrl
