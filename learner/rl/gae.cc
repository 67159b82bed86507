#include "learner/rl/gae.h"

#include <algorithm>

#include <cstddef>

namespace kernelrl::learner::rl {

GaeResult Gae(const std::vector<float>& rewards, const std::vector<float>& values, double gamma, double lambda) {
  const size_t n = values.size();
  GaeResult out{std::vector<float>(n), std::vector<float>(n)};
  double next_value = 0.0, next_advantage = 0.0;
  for (size_t k = n; k-- > 0;) {
    const double delta = rewards[k] + gamma * next_value - values[k];
    next_advantage = delta + gamma * lambda * next_advantage;
    next_value = values[k];
    out.advantages[k] = static_cast<float>(next_advantage);
    out.returns[k] = static_cast<float>(next_advantage + values[k]);
  }
  return out;
}

double LengthAdaptiveLambda(int64_t n, double alpha) {
  if (n <= 0 || alpha <= 0) return 1.0;
  const double l = 1.0 - 1.0 / (alpha * static_cast<double>(n));
  return l < 0 ? 0.0 : l;
}

std::vector<float> OutcomeRewards(int n, double reward) {
  std::vector<float> r(n, 0.0f);
  if (n > 0) r[n - 1] = static_cast<float>(reward);
  return r;
}

double ExplainedVariance(const std::vector<float>& values, const std::vector<float>& returns) {
  const size_t n = returns.size();
  if (n == 0) return 0.0;
  double mean_r = 0, mean_d = 0;
  for (size_t i = 0; i < n; ++i) {
    mean_r += returns[i];
    mean_d += returns[i] - values[i];
  }
  mean_r /= n;
  mean_d /= n;
  double var_r = 0, var_d = 0;
  for (size_t i = 0; i < n; ++i) {
    var_r += (returns[i] - mean_r) * (returns[i] - mean_r);
    const double d = returns[i] - values[i] - mean_d;
    var_d += d * d;
  }
  return var_r <= 0 ? 0.0 : 1.0 - var_d / var_r;
}

double ExplainedVarianceOfSums(double n, double target_sum, double target_sq_sum, double residual_sum,
                               double residual_sq_sum) {
  const double k = std::max(1.0, n), mr = target_sum / k, md = residual_sum / k;
  const double var_r = target_sq_sum / k - mr * mr, var_d = residual_sq_sum / k - md * md;
  return var_r <= 1e-12 * std::max(1.0, target_sq_sum / k) ? 0.0 : 1.0 - var_d / var_r;
}

std::vector<float> PaperValueTargets(const std::vector<float>& values, double reward) {
  return Gae(OutcomeRewards(static_cast<int>(values.size()), reward), values, 1.0, 0.95).returns;
}

}  // namespace kernelrl::learner::rl
