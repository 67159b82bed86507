// Small order statistics over per-call samples. Empty input gives 0 (callers
// flag "no_samples" themselves); the functions never throw.
#ifndef KERNELRL_PROFILER_SERVICE_STATS_H_
#define KERNELRL_PROFILER_SERVICE_STATS_H_

#include <vector>

namespace kernelrl {

double Median(std::vector<double> values);
double Mean(const std::vector<double>& values);
// Sample standard deviation (n - 1 in the denominator); 0 for n < 2.
double StdDev(const std::vector<double>& values);
// Standard error of the mean over the mean: stddev / sqrt(n) / mean. A single
// sample or a zero mean gives +inf (never "converged").
double RelStdError(const std::vector<double>& values);

}  // namespace kernelrl

#endif  // KERNELRL_PROFILER_SERVICE_STATS_H_
