// The rules that accept or reject a candidate, all in one place, over facts
// the worker measured (ProbeFacts) and the profiler's eager baseline.
//
// Filters in pipeline order (the report's per-filter table uses this order):
//   compose        the composer could not build the candidate
//   duplicate      normalised-AST hash already accepted or in flight
//   contaminated   AST similarity to a KernelBench program > max_similarity
//   eager          loading, building, inputs or the eager call failed
//   oom            out of memory even with the whole GPU budget (data/memory_budget.h):
//                  a task short of memory only because other workers ran beside it
//                  is run again with a larger grant, never rejected
//   stochastic     same inputs twice gave different outputs (before compile: a
//                  random operator also makes compiled outputs differ)
//   non_finite     NaN or Inf in the output
//   constant       the output does not vary over its elements
//   indistinguishable  outputs for two different inputs agree within the
//                  verification tolerance on most elements (a candidate could
//                  return a constant and pass)
//   near_zero      most outputs within atol of 0
//   near_mean      most outputs within tolerance of their mean
//   compile        torch.compile (compile_backend) failed or disagrees with eager
//                  (after the eager rules: compiling is the probe's costly part,
//                  so the pipeline compiles only what they kept)
//   timing         the profiler could not time the eager run
//   runtime        eager median outside [min_eager_ms, max_eager_ms]
#ifndef KERNELRL_DATA_FILTERS_H_
#define KERNELRL_DATA_FILTERS_H_

#include <optional>
#include <string>
#include <vector>

#include "data/data.pb.h"
#include "proto/profiler.pb.h"

namespace kernelrl {

using ::kernelrl::v1::Baseline;
using ::kernelrl::v1::FilterConfig;
using ::kernelrl::v1::ProbeFacts;

struct Rejection {
  std::string filter;  // One of FilterOrder().
  std::string detail;
};

const std::vector<std::string>& FilterOrder();

// Fills what proto3 cannot default (0 means "use the default").
FilterConfig WithFilterDefaults(FilterConfig c);

// The rules over the eager facts (eager .. near_mean), then those over the
// compiled run (compile); JudgeProbe is both, in FilterOrder.
std::optional<Rejection> JudgeEager(const ProbeFacts& facts, const FilterConfig& config);
std::optional<Rejection> JudgeCompile(const ProbeFacts& facts, const FilterConfig& config);
std::optional<Rejection> JudgeProbe(const ProbeFacts& facts, const FilterConfig& config);
std::optional<Rejection> JudgeRuntime(const Baseline& eager_baseline, const FilterConfig& config);

}  // namespace kernelrl

#endif  // KERNELRL_DATA_FILTERS_H_
