// CutForFinalEvaluation: the job is cut early enough that the evaluation after it, as long as the
// longest one so far and a quarter, ends by --job_timeout_s; DescribeCut: the console line.
#include "tools/cli/job_cut.h"

#include "gtest/gtest.h"

namespace kernelrl::cli {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'000'000);
const absl::Time kLimit = kStart + absl::Seconds(466);

TEST(JobCutTest, NoEvaluationTimedYetCutsAtTheLimit) {
  for (absl::Duration none : {absl::ZeroDuration(), absl::Seconds(-3)}) {
    const JobCut cut = CutForFinalEvaluation(kLimit, none, kStart + absl::Seconds(10));
    EXPECT_EQ(cut.reserve, absl::ZeroDuration());
    EXPECT_EQ(cut.at, kLimit);
  }
}

TEST(JobCutTest, ReservesTheLongestEvaluationAndAQuarter) {
  const JobCut cut = CutForFinalEvaluation(kLimit, absl::Seconds(66), kStart + absl::Seconds(100));
  EXPECT_EQ(cut.reserve, absl::Seconds(82.5));
  EXPECT_EQ(cut.at, kLimit - absl::Seconds(82.5));
  EXPECT_LE(cut.at + cut.reserve, kLimit);
}

TEST(JobCutTest, ALongerEvaluationMovesTheCutEarlier) {
  const absl::Time now = kStart + absl::Seconds(100);
  EXPECT_LT(CutForFinalEvaluation(kLimit, absl::Seconds(70), now).at,
            CutForFinalEvaluation(kLimit, absl::Seconds(30), now).at);
}

TEST(JobCutTest, TheCutIsNeverBeforeNow) {
  // 400 s in, 66 s left before the limit: the reserve (82.5 s) no longer fits, so the job is cut now.
  const absl::Time now = kStart + absl::Seconds(400);
  JobCut cut = CutForFinalEvaluation(kLimit, absl::Seconds(66), now);
  EXPECT_EQ(cut.at, now);
  EXPECT_EQ(cut.reserve, absl::Seconds(82.5));
  // Past the limit itself, with or without a reserve.
  const absl::Time late = kLimit + absl::Seconds(5);
  EXPECT_EQ(CutForFinalEvaluation(kLimit, absl::Seconds(66), late).at, late);
  EXPECT_EQ(CutForFinalEvaluation(kLimit, absl::ZeroDuration(), late).at, late);
  // Exactly at the cut: the cut is now, not later.
  const absl::Time at = kLimit - absl::Seconds(82.5);
  EXPECT_EQ(CutForFinalEvaluation(kLimit, absl::Seconds(66), at).at, at);
}

TEST(JobCutTest, BeforeTheCutTheJobGoesOn) {
  const absl::Time now = kStart + absl::Seconds(50);
  EXPECT_GT(CutForFinalEvaluation(kLimit, absl::Seconds(66), now).at, now);
}

TEST(JobCutTest, DescribeCutSaysTheReserveAndTheLimit) {
  const absl::Duration longest = absl::Seconds(66);
  const JobCut cut = CutForFinalEvaluation(kLimit, longest, kStart + absl::Seconds(380));
  EXPECT_EQ(DescribeCut(cut, longest, kLimit, kStart, "final evaluation"),
            "job cut at 384 s, 82 s before the 466 s limit: room for the final evaluation (~83 s: the longest so "
            "far 66 s and a quarter)");
  const JobCut none = CutForFinalEvaluation(kLimit, absl::ZeroDuration(), kLimit);
  EXPECT_EQ(DescribeCut(none, absl::ZeroDuration(), kLimit, kStart, "pause evaluation"),
            "job cut at the 466 s limit: no held-out evaluation timed yet to leave room for the pause evaluation");
  EXPECT_EQ(DescribeCut(none, absl::ZeroDuration(), kLimit, kStart, ""),
            "job cut at the 466 s limit (no evaluation after it)");
  // Late (the reserve grew past the time left): the line shows less room than the reserve.
  const JobCut late = CutForFinalEvaluation(kLimit, longest, kStart + absl::Seconds(420));
  EXPECT_EQ(DescribeCut(late, longest, kLimit, kStart, "final evaluation"),
            "job cut at 420 s, 46 s before the 466 s limit: room for the final evaluation (~83 s: the longest so "
            "far 66 s and a quarter)");
}

}  // namespace
}  // namespace kernelrl::cli
