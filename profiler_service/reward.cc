#include "profiler_service/reward.h"

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
  if (beats_eager && beats_compile) return 3.0;
  if (beats_eager) return 2.0;
  return 1.0;
}

}  // namespace kernelrl
