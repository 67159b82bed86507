// The reward: one definition, RewardFor(verdict), applied in one place (the
// sandbox worker's Evaluator::Evaluate, after every stage has run). Nothing
// else sets Verdict.reward; the trajectory carries its final verdict's.
//
// RewardFor, by outcome:
//   INFRA_ERROR                 0, and not a training sample (IsTrainingSample
//                               false): the machine failed, not the candidate;
//                               the learner drops the trajectory with a counted
//                               reason and issues the task again;
//   OK, quarantined             min(milestone, 1): held until an audit;
//   OK, flag "profile_skipped"  1: correct, not benchmarked;
//   OK otherwise                the milestone reward of its speed-ups (below);
//   anything else               -1 (OUTCOME_UNSPECIFIED too: no verdict at all).
//
// The paper's milestone reward (CUDA Agent, §3):
//
//   -1  the candidate is not correct;
//    3  correct and more than `margin` faster than BOTH eager and torch.compile;
//    2  correct and more than `margin` faster than eager only;
//    1  otherwise (correct, including "faster than torch.compile but not eager"
//       and "correct but not profiled").
//
// "More than 5% faster" is read as speed-up = baseline_time / candidate_time
// strictly greater than 1 + margin (margin = 0.05): a speed-up of exactly 1.05
// earns nothing extra. A speed-up that is not a finite positive number (not
// profiled, missing baseline) never counts as faster. Nor does one the judge
// found unresolved (flag kUnresolvedVsEager / kUnresolvedVsCompile: above
// 1 + margin, but not by twice the two figures' combined relative standard
// error): a milestone is paid for speed that was measured, not for noise.
#ifndef KERNELRL_PROFILER_SERVICE_REWARD_H_
#define KERNELRL_PROFILER_SERVICE_REWARD_H_

#include "proto/verdict.pb.h"

namespace kernelrl {

inline constexpr double kDefaultMilestoneMargin = 0.05;
// The top milestone: faster than both eager and torch.compile, by more than the margin and resolved.
inline constexpr double kRewardFasterThanBoth = 3.0;
inline constexpr char kUnresolvedVsEager[] = "speedup_vs_eager_unresolved";
inline constexpr char kUnresolvedVsCompile[] = "speedup_vs_compile_unresolved";
// Info: a candidate without graph-replayed figures was compared with the
// baseline's graph-replayed figure (whether a capture succeeds is the
// candidate's process's choice; it cannot move the comparison to eager-timed
// figures, which carry each side's per-call host cost).
inline constexpr char kHeldToBaselineGraph[] = "held_to_baseline_graph";

// True when `speedup` (baseline / candidate) is more than `margin` faster.
bool FasterByMoreThan(double speedup, double margin = kDefaultMilestoneMargin);

double MilestoneReward(bool correct, double speedup_vs_eager,
                       double speedup_vs_compile,
                       double margin = kDefaultMilestoneMargin);

// The reward of `verdict` (the table above). `margin`: ProfilerConfig.milestone_margin.
double RewardFor(const v1::Verdict& verdict, double margin = kDefaultMilestoneMargin);

// False for a verdict that must never be trained on (INFRA_ERROR).
bool IsTrainingSample(const v1::Verdict& verdict);

}  // namespace kernelrl

#endif  // KERNELRL_PROFILER_SERVICE_REWARD_H_
