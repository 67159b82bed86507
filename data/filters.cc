#include "data/filters.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace kernelrl {

const std::vector<std::string>& FilterOrder() {
  static const std::vector<std::string> order = {
      "llm",      "compose",           "duplicate", "contaminated", "eager",   "oom",    "stochastic", "non_finite",
      "constant", "indistinguishable", "near_zero", "near_mean",    "compile", "timing", "runtime"};
  return order;
}

FilterConfig WithFilterDefaults(FilterConfig c) {
  if (c.compile_backend().empty()) c.set_compile_backend("inductor");
  if (c.min_eager_ms() <= 0) c.set_min_eager_ms(1.0);
  if (c.max_eager_ms() <= 0) c.set_max_eager_ms(100.0);
  if (c.atol() <= 0) c.set_atol(1e-2);
  if (c.rtol() <= 0) c.set_rtol(1e-2);
  if (c.max_near_zero_fraction() <= 0) c.set_max_near_zero_fraction(0.8);
  if (c.max_near_mean_fraction() <= 0) c.set_max_near_mean_fraction(0.8);
  if (c.max_indistinguishable_fraction() <= 0) c.set_max_indistinguishable_fraction(0.9);
  if (c.max_repeat_rel_diff() <= 0) c.set_max_repeat_rel_diff(1e-5);
  if (c.max_compile_rel_diff() <= 0) c.set_max_compile_rel_diff(1e-2);
  if (c.timing_budget_s() <= 0) c.set_timing_budget_s(0.05);
  if (c.timing_min_samples() <= 0) c.set_timing_min_samples(3);
  if (c.timing_max_samples() <= 0) c.set_timing_max_samples(20);
  if (c.oom_retries() <= 0) c.set_oom_retries(2);
  return c;
}

std::optional<Rejection> JudgeEager(const ProbeFacts& f, const FilterConfig& c) {
  const std::string& stage = f.error_stage();
  if (stage == "oom") return Rejection{"oom", f.error()};
  if (!stage.empty() && stage != "compile") return Rejection{"eager", absl::StrFormat("%s: %s", stage, f.error())};
  // Scale of the output for relative comparisons; tiny outputs are judged by the near-zero rule.
  const double scale = std::max(f.output_abs_mean(), 1e-12);
  if (f.repeat_max_abs_diff() > c.max_repeat_rel_diff() * scale)
    return Rejection{"stochastic", absl::StrFormat("same inputs, outputs differ by %.3g (mean |y| %.3g)",
                                                   f.repeat_max_abs_diff(), f.output_abs_mean())};
  if (f.non_finite()) return Rejection{"non_finite", "NaN or Inf in the output"};
  if (f.numel() > 1 && f.output_std() <= 1e-6 * std::max(1.0, f.output_abs_mean()))
    return Rejection{"constant", absl::StrFormat("output std %.3g over %d elements", f.output_std(), f.numel())};
  if (f.indistinguishable_fraction() > c.max_indistinguishable_fraction())
    return Rejection{"indistinguishable",
                     absl::StrFormat("%.1f%% of outputs equal within tolerance for different inputs",
                                     100 * f.indistinguishable_fraction())};
  if (f.near_zero_fraction() > c.max_near_zero_fraction())
    return Rejection{"near_zero", absl::StrFormat("%.1f%% of outputs within %.3g of 0", 100 * f.near_zero_fraction(),
                                                  c.atol())};
  if (f.near_mean_fraction() > c.max_near_mean_fraction())
    return Rejection{"near_mean", absl::StrFormat("%.1f%% of outputs within tolerance of their mean",
                                                  100 * f.near_mean_fraction())};
  return std::nullopt;
}

std::optional<Rejection> JudgeCompile(const ProbeFacts& f, const FilterConfig& c) {
  if (f.error_stage() == "oom") return Rejection{"oom", f.error()};
  if (f.error_stage() == "compile") return Rejection{"compile", f.error()};
  const double scale = std::max(f.output_abs_mean(), 1e-12);
  if (!c.compile_backend().empty() && f.compile_max_abs_diff() > c.max_compile_rel_diff() * std::max(scale, c.atol()))
    return Rejection{"compile", absl::StrFormat("compiled output differs by %.3g (mean |y| %.3g)",
                                                f.compile_max_abs_diff(), f.output_abs_mean())};
  return std::nullopt;
}

std::optional<Rejection> JudgeProbe(const ProbeFacts& f, const FilterConfig& c) {
  if (auto r = JudgeEager(f, c)) return r;
  return JudgeCompile(f, c);
}

std::optional<Rejection> JudgeRuntime(const Baseline& b, const FilterConfig& c) {
  if (!b.error().empty()) return Rejection{"timing", b.error()};
  const double ms = b.eager().median_us() / 1e3;
  if (ms <= 0) return Rejection{"timing", "no eager median"};
  if (ms < c.min_eager_ms())
    return Rejection{"runtime", absl::StrFormat("eager %.3f ms < %.3g ms", ms, c.min_eager_ms())};
  if (ms > c.max_eager_ms())
    return Rejection{"runtime", absl::StrFormat("eager %.3f ms > %.3g ms", ms, c.max_eager_ms())};
  return std::nullopt;
}

}  // namespace kernelrl
