#include "profiler_service/timing_analysis.h"

#include <algorithm>

#include "gtest/gtest.h"
#include "profiler_service/profiler_defaults.h"
#include "profiler_service/test_util.h"

namespace kernelrl {
namespace {

using testing_util::NoisyRun;

bool HasFlag(const TimingStats& s, const std::string& f) {
  return std::find(s.flags().begin(), s.flags().end(), f) != s.flags().end();
}

const ProfilerConfig& Config() {
  static const ProfilerConfig c = WithProfilerDefaults(ProfilerConfig());
  return c;
}

TEST(TimingAnalysis, CuptiMedianIsTheReportedTime) {
  RawTimingRun run = NoisyRun(50.0, 400, 0.005, 7);
  const TimingStats s = AnalyzeTimingRun(run, Config());
  EXPECT_NEAR(s.median_us(), 50.0, 0.2);
  EXPECT_NEAR(s.event_median_us(), 52.5, 0.3);
  EXPECT_LT(s.rel_std_error(), 0.01);
  EXPECT_EQ(s.samples(), 400);
  EXPECT_FALSE(HasFlag(s, "rse_above_target"));
  EXPECT_FALSE(HasFlag(s, "events_below_cupti"));
}

TEST(TimingAnalysis, NoisyShortRunIsFlagged) {
  const TimingStats s = AnalyzeTimingRun(NoisyRun(50.0, 10, 0.2, 8), Config());
  EXPECT_GT(s.rel_std_error(), 0.01);
  EXPECT_TRUE(HasFlag(s, "rse_above_target"));
}

TEST(TimingAnalysis, MedianIgnoresOutliers) {
  RawTimingRun run = NoisyRun(20.0, 101, 0.001, 9);
  for (int i = 0; i < 20; ++i) run.mutable_samples(i)->set_cupti_us(5000.0);
  EXPECT_NEAR(AnalyzeTimingRun(run, Config()).median_us(), 20.0, 0.1);
}

TEST(TimingAnalysis, ThrottledSamplesLeaveTheMedianWhenEnoughRemain) {
  RawTimingRun run = NoisyRun(30.0, 60, 0.001, 10);
  for (int i = 0; i < 20; ++i) {
    run.mutable_samples(i)->set_cupti_us(45.0);
    run.mutable_samples(i)->set_throttled(true);
  }
  const TimingStats s = AnalyzeTimingRun(run, Config());
  EXPECT_NEAR(s.median_us(), 30.0, 0.1);
  EXPECT_EQ(s.throttled_samples(), 20);
  EXPECT_TRUE(HasFlag(s, "throttled"));  // 33% > 20% default.
}

TEST(TimingAnalysis, SideStreamSignatureEventsBelowCupti) {
  // Events on the harness stream saw 10% of the GPU time CUPTI recorded.
  const TimingStats s = AnalyzeTimingRun(NoisyRun(100.0, 50, 0.01, 11, 0.1), Config());
  EXPECT_TRUE(HasFlag(s, "events_below_cupti"));
}

TEST(TimingAnalysis, LaunchBoundCallIsInformationalOnly) {
  const TimingStats s = AnalyzeTimingRun(NoisyRun(5.0, 50, 0.01, 12, 4.0), Config());
  EXPECT_TRUE(HasFlag(s, "events_above_cupti"));
  EXPECT_FALSE(HasFlag(s, "events_below_cupti"));
}

TEST(TimingAnalysis, WallBelowEventsIsAClockAnomaly) {
  RawTimingRun run = NoisyRun(100.0, 20, 0.001, 13);
  for (auto& s : *run.mutable_samples()) s.set_wall_us(10.0);
  EXPECT_TRUE(HasFlag(AnalyzeTimingRun(run, Config()), "wall_below_events"));
}

TEST(TimingAnalysis, CpuBackendUsesWallClock) {
  const TimingStats s = AnalyzeTimingRun(NoisyRun(300.0, 200, 0.01, 14, 1.0, "cpu"), Config());
  EXPECT_NEAR(s.median_us(), 300.0, 2.0);
  EXPECT_EQ(s.event_median_us(), 0.0);
  EXPECT_FALSE(HasFlag(s, "cupti_inactive"));
}

TEST(TimingAnalysis, CudaWithoutCuptiAttributesWithEvents) {
  RawTimingRun run = NoisyRun(40.0, 50, 0.001, 15, 1.1);
  run.set_cupti_active(false);
  const TimingStats s = AnalyzeTimingRun(run, Config());
  EXPECT_NEAR(s.median_us(), 40.0, 0.2);  // the trusted figure pays, with or without CUPTI
  EXPECT_NEAR(s.in_process_median_us(), 44.0, 0.2);
  EXPECT_TRUE(HasFlag(s, "cupti_inactive"));
  EXPECT_FALSE(HasFlag(s, "untrusted_timing"));
  // Without trusted figures (a run recorded before the trusted clock), events pay and it says so.
  for (CallSample& c : *run.mutable_samples()) c.set_trusted_us(0);
  const TimingStats u = AnalyzeTimingRun(run, Config());
  EXPECT_NEAR(u.median_us(), 44.0, 0.2);
  EXPECT_TRUE(HasFlag(u, "untrusted_timing"));
}

TEST(TimingAnalysis, EmptyOrFailedRuns) {
  RawTimingRun run;
  run.set_backend("cuda");
  run.set_error("candidate: RuntimeError");
  const TimingStats s = AnalyzeTimingRun(run, Config());
  EXPECT_TRUE(HasFlag(s, "no_samples"));
  EXPECT_TRUE(HasFlag(s, "run_error"));
}

TEST(TimingAnalysis, RecheckFailureAndDroppedRecordsAreFlagged) {
  RawTimingRun run = NoisyRun(40.0, 50, 0.001, 16);
  run.set_recheck_failures(1);
  run.set_dropped_records(3);
  const TimingStats s = AnalyzeTimingRun(run, Config());
  EXPECT_TRUE(HasFlag(s, "recheck_failed"));
  EXPECT_TRUE(HasFlag(s, "cupti_records_dropped"));
}

}  // namespace
}  // namespace kernelrl
