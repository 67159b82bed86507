#include "profiler_service/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kernelrl {

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + mid);
  return 0.5 * (lower + upper);
}

double Mean(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  double sum = 0.0;
  for (double x : v) sum += x;
  return sum / v.size();
}

double StdDev(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  const double m = Mean(v);
  double ss = 0.0;
  for (double x : v) ss += (x - m) * (x - m);
  return std::sqrt(ss / (v.size() - 1));
}

double RelStdError(const std::vector<double>& v) {
  const double m = Mean(v);
  if (v.size() < 2 || m == 0.0) return std::numeric_limits<double>::infinity();
  return StdDev(v) / std::sqrt(static_cast<double>(v.size())) / std::fabs(m);
}

}  // namespace kernelrl
