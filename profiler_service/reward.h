// The paper's milestone reward (CUDA Agent, §3): one function shared by the
// profiler and the sandbox so the reward has exactly one definition.
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
// profiled, missing baseline) never counts as faster.
#ifndef KERNELRL_PROFILER_SERVICE_REWARD_H_
#define KERNELRL_PROFILER_SERVICE_REWARD_H_

namespace kernelrl {

inline constexpr double kDefaultMilestoneMargin = 0.05;

// True when `speedup` (baseline / candidate) is more than `margin` faster.
bool FasterByMoreThan(double speedup, double margin = kDefaultMilestoneMargin);

double MilestoneReward(bool correct, double speedup_vs_eager,
                       double speedup_vs_compile,
                       double margin = kDefaultMilestoneMargin);

}  // namespace kernelrl

#endif  // KERNELRL_PROFILER_SERVICE_REWARD_H_
