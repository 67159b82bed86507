#include "profiler_service/reward.h"

#include <algorithm>
#include <cmath>

namespace kernelrl {

bool FasterByMoreThan(double speedup, double margin) {
  if (!std::isfinite(speedup) || speedup <= 0.0) return false;
  return speedup > 1.0 + margin;
}

double MilestoneReward(bool correct, double speedup_vs_eager,
                       double speedup_vs_compile, double margin) {
  if (!correct) return -1.0;
  const bool beats_eager = FasterByMoreThan(speedup_vs_eager, margin);
  const bool beats_compile = FasterByMoreThan(speedup_vs_compile, margin);
  if (beats_eager && beats_compile) return kRewardFasterThanBoth;
  if (beats_eager) return 2.0;
  return 1.0;
}

double RewardFor(const v1::Verdict& v, double margin) {
  switch (v.outcome()) {
    case v1::Verdict::INFRA_ERROR:
      return 0.0;
    case v1::Verdict::OK: {
      if (std::find(v.flags().begin(), v.flags().end(), "profile_skipped") != v.flags().end()) return 1.0;
      auto has = [&](const char* flag) { return std::find(v.flags().begin(), v.flags().end(), flag) != v.flags().end(); };
      const double milestone = MilestoneReward(true, has(kUnresolvedVsEager) ? 0.0 : v.speedup_vs_eager(),
                                               has(kUnresolvedVsCompile) ? 0.0 : v.speedup_vs_compile(), margin);
      return v.quarantined() ? std::min(milestone, 1.0) : milestone;
    }
    default:
      return -1.0;
  }
}

bool IsTrainingSample(const v1::Verdict& v) { return v.outcome() != v1::Verdict::INFRA_ERROR; }

}  // namespace kernelrl
