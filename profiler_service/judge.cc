#include "profiler_service/judge.h"

#include "profiler_service/library_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/str_format.h"
#include "profiler_service/integrity.h"
#include "profiler_service/reward.h"
#include "profiler_service/speed_of_light.h"
#include "profiler_service/timing_analysis.h"

namespace kernelrl {
namespace {

double SpeedUp(double baseline_us, double candidate_us) {
  if (baseline_us <= 0.0 || candidate_us <= 0.0) return 0.0;
  return baseline_us / candidate_us;
}

// How far a speed-up must stand above 1 + margin, in combined relative
// standard errors of the two figures, before its milestone is paid: on the
// H100 an honest ReLU timed from one baseline block drew reward 2 in 25 of 50
// evaluations at 1.01-1.08x eager.
constexpr double kResolveSigmas = 2.0;

// True when `speedup` would pass the milestone's margin but the two figures'
// noise could make it: the verdict keeps the figure, the reward does not pay it.
bool Unresolved(double speedup, double candidate_rse, double baseline_rse, double margin) {
  const double sigma = std::sqrt(candidate_rse * candidate_rse + baseline_rse * baseline_rse);
  return FasterByMoreThan(speedup, margin) && !(speedup > (1.0 + margin) * (1.0 + kResolveSigmas * sigma));
}

}  // namespace

CopyOffsets CommonCopyOffsets(const CopyRates& cand, const CopyRates& base) {
  CopyOffsets off;
  if (!(cand.input_bytes_per_us() > 0.0 && base.input_bytes_per_us() > 0.0)) return off;
  const double input_rate = std::max(cand.input_bytes_per_us(), base.input_bytes_per_us());
  off.candidate_us = cand.input_bytes() / cand.input_bytes_per_us() - cand.input_bytes() / input_rate;
  off.baseline_us = base.input_bytes() / base.input_bytes_per_us() - base.input_bytes() / input_rate;
  return off;
}

FlagSeverity SeverityOf(const std::string& flag) {
  static const std::set<std::string> kHack = {
      "recheck_failed", "no_candidate_kernels", "own_kernel_share_below_min", "library_only",
      "forbidden_library_cublas", "forbidden_library_cudnn", "work_outside_window"};
  static const std::set<std::string> kAudit = {
      "below_speed_of_light", "speedup_above_audit_threshold", "side_stream",
      "foreign_launch_thread", "events_below_cupti", "wall_below_events",
      "cupti_records_dropped", "baseline_clock_mismatch"};
  // The device could not be measured as the baseline was (drift anchor off,
  // clocks throttled, another process's kernels time-slicing with ours): no
  // verdict on the candidate.
  static const std::set<std::string> kDecline = {"device_drift", "throttled", "device_shared"};
  if (kHack.count(flag)) return FlagSeverity::kHack;
  if (kDecline.count(flag)) return FlagSeverity::kDecline;
  if (kAudit.count(flag)) return FlagSeverity::kAudit;
  return FlagSeverity::kInfo;
}

std::string JudgedOk(const Verdict& v, bool quarantined) {
  // The launched median carries the host's per-call cost, and the policy reads this line: the same
  // kernels scored in two calls on one H200 had launched medians a median 1.10x apart (up to 1.7x),
  // their ratios 1.01-1.02x.
  const double shown = v.eager_basis().candidate_us() > 0.0 ? v.eager_basis().candidate_us() : v.candidate_time_us();
  return absl::StrFormat("%.1f us; %.2fx eager, %.2fx compile%s", shown, v.speedup_vs_eager(), v.speedup_vs_compile(),
                         quarantined ? " (quarantined for audit)" : "");
}

ProfileResult JudgeProfile(const ProfileMeasurement& m, const Baseline* baseline,
                           const Task& task, const ProfilerConfig& config) {
  ProfileResult result;
  Verdict& v = *result.mutable_verdict();
  v.set_gpu_model(m.device().gpu_model());
  v.set_torch_version(m.device().torch_version());
  *result.mutable_candidate() = AnalyzeTimingRun(m.candidate(), config);
  const TimingStats& cand = result.candidate();
  std::vector<std::string> flags(cand.flags().begin(), cand.flags().end());
  std::string drift;  // The anchor's two figures, when they differ past the tolerance.

  if (!m.candidate().error().empty() || cand.samples() == 0) {
    const bool candidate_fault = m.candidate().error().rfind("candidate", 0) == 0;
    v.set_outcome(candidate_fault ? Verdict::CRASH : Verdict::INFRA_ERROR);
    v.set_summary("profile: " + (m.candidate().error().empty() ? std::string("no samples")
                                                               : m.candidate().error()));
    for (const auto& f : flags) v.add_flags(f);
    return result;
  }

  // A task without a policy gets the paper's rule from its source (cuBLAS for GEMM, cuDNN for conv).
  const IntegrityReport integrity = AnalyzeIntegrity(m, EffectiveLibraryPolicy(task), config);
  *v.mutable_coverage() = integrity.coverage;
  flags.insert(flags.end(), integrity.flags.begin(), integrity.flags.end());

  const double t = cand.median_us();
  v.set_candidate_time_us(t);
  v.set_candidate_graph_time_us(cand.graph_median_us());
  // The executor's own figure below half the trusted one: its process claimed
  // time the trusted clock did not see (a forgery, or launch overhead around
  // tiny kernels). For the record only: it never paid.
  if (cand.in_process_median_us() > 0.0 && cand.in_process_median_us() < 0.5 * t) {
    flags.push_back("in_process_below_trusted");
  }
  double sol_us = SpeedOfLightUs(m.work(), m.device(), config);
  if (baseline != nullptr) {
    *result.mutable_baseline() = *baseline;
    v.set_eager_time_us(baseline->eager().median_us());
    v.set_compile_time_us(baseline->compiled().median_us());
    v.set_eager_graph_time_us(baseline->eager().graph_median_us());
    v.set_compile_graph_time_us(baseline->compiled().graph_median_us());
    // Like with like: graph-replayed figures where both sides have them, and
    // our copies taken off both at the same rates. A candidate without graph
    // figures (its capture failed, or a replay was wrong) against a baseline
    // with them is held to the baseline's graph figure: whether a capture
    // succeeds is the executor's choice, and it must not move the comparison to
    // eager figures, which carry each side's per-call host cost (torch.compile's
    // is ~10x its kernels' on the ~10 us tasks: docs/HARNESS.md).
    bool held_to_graph = false;
    struct Compared {
      double speedup;
      bool graph_with_graph, base_graph;
    };
    auto speedup = [&](const TimingStats& base, SpeedUpBasis* basis) {
      const bool cand_graph = cand.graph_median_us() > 0.0, base_graph = base.graph_median_us() > 0.0;
      const CopyOffsets off = CommonCopyOffsets(cand.copies(), base.copies());
      const double base_us = (base_graph ? base.graph_median_us() : base.median_us()) + off.baseline_us;
      const double cand_us = (cand_graph && base_graph ? cand.graph_median_us() : t) + off.candidate_us;
      held_to_graph |= base_graph && !cand_graph;
      basis->set_candidate_us(cand_us);
      basis->set_baseline_us(base_us);
      basis->set_candidate_graph(cand_graph && base_graph);
      basis->set_baseline_graph(base_graph);
      return Compared{SpeedUp(base_us, cand_us), cand_graph && base_graph, base_graph};
    };
    const Compared vs_eager = speedup(baseline->eager(), v.mutable_eager_basis()),
                   vs_compile = speedup(baseline->compiled(), v.mutable_compile_basis());
    v.set_speedup_vs_eager(vs_eager.speedup);
    v.set_speedup_vs_compile(vs_compile.speedup);
    v.set_speedup_vs_eager_graph(vs_eager.graph_with_graph);
    v.set_speedup_vs_compile_graph(vs_compile.graph_with_graph);
    if (held_to_graph) flags.push_back(kHeldToBaselineGraph);
    auto rse = [](const TimingStats& s, bool graph) { return graph ? s.graph_rel_std_error() : s.rel_std_error(); };
    if (Unresolved(vs_eager.speedup, rse(cand, vs_eager.graph_with_graph),
                   rse(baseline->eager(), vs_eager.base_graph), config.milestone_margin())) {
      flags.push_back(kUnresolvedVsEager);
    }
    if (Unresolved(vs_compile.speedup, rse(cand, vs_compile.graph_with_graph),
                   rse(baseline->compiled(), vs_compile.base_graph), config.milestone_margin())) {
      flags.push_back(kUnresolvedVsCompile);
    }
    if (sol_us <= 0.0) sol_us = baseline->speed_of_light_us();
    // Speed-ups only compare like with like: trusted figures with trusted figures.
    auto untrusted = [](const TimingStats& s) {
      return std::find(s.flags().begin(), s.flags().end(), "untrusted_timing") != s.flags().end();
    };
    if (untrusted(cand) != untrusted(baseline->eager())) flags.push_back("baseline_clock_mismatch");
    if (baseline->anchor_median_us() > 0.0 && m.anchor().samples_size() > 0) {
      const double now = AnalyzeTimingRun(m.anchor(), config).median_us();
      if (std::fabs(now / baseline->anchor_median_us() - 1.0) > config.anchor_drift_tolerance()) {
        flags.push_back("device_drift");
        drift = absl::StrFormat("drift anchor %.1f us now, %.1f us at baseline", now, baseline->anchor_median_us());
      }
    }
  } else {
    flags.push_back("baseline_missing");
  }
  if (sol_us > 0.0) {
    // The faster of the two modes: neither may beat the floor.
    const double fastest = cand.graph_median_us() > 0.0 ? std::min(t, cand.graph_median_us()) : t;
    v.set_speed_of_light_ratio(fastest / sol_us);
    if (fastest < config.speed_of_light_margin() * sol_us) flags.push_back("below_speed_of_light");
  }
  if (std::max(v.speedup_vs_eager(), v.speedup_vs_compile()) > config.quarantine_speedup()) {
    flags.push_back("speedup_above_audit_threshold");
  }

  bool hack = false, audit = false, wrong = false;
  std::string first_hack, first_decline;
  for (const std::string& f : flags) {
    v.add_flags(f);
    const FlagSeverity s = SeverityOf(f);
    if (s == FlagSeverity::kHack && first_hack.empty()) first_hack = f;
    if (s == FlagSeverity::kDecline && first_decline.empty()) first_decline = f;
    hack |= s == FlagSeverity::kHack;
    audit |= s == FlagSeverity::kAudit;
    wrong |= f == "recheck_failed";
  }
  if (wrong) {
    v.set_outcome(Verdict::WRONG_ANSWER);
    v.set_summary("a re-checked timed call returned a wrong output");
  } else if (!first_decline.empty() && !hack) {
    v.set_outcome(Verdict::INFRA_ERROR);
    const std::string why = first_decline == "device_shared"
                                ? "another process did GPU work while the blocks ran"
                                : "the device did not measure as it did for the baseline";
    v.set_summary(absl::StrFormat("not judged: %s (%s; %s)", first_decline, why,
                                  first_decline == "device_drift" ? drift : absl::StrFormat("%.1f us now", t)));
  } else if (hack) {
    v.set_outcome(Verdict::HACK_DETECTED);
    v.set_summary(absl::StrFormat("integrity: %s (own kernels %.0f%% of GPU time; %.1f us claimed in-process)",
                                  first_hack, 100.0 * integrity.own_share, t));
  } else {
    v.set_outcome(Verdict::OK);
    v.set_quarantined(audit);
    v.set_summary(JudgedOk(v, audit));
  }
  return result;
}

std::string WhyBaselineDoesNotPay(const Baseline& b) {
  if (!b.error().empty()) return "baseline recorded an error: " + b.error();
  if (b.eager().median_us() <= 0) return "baseline has no eager time";
  if (b.timing_path() != "executor") {
    return "baseline timed in its own process, not through the executor path (measure_baselines)";
  }
  if (b.protocol() < kBaselineProtocol) {
    return absl::StrFormat("baseline measured under protocol %d, before %d (docs/PROFILER.md): measure it again "
                           "(measure_baselines)",
                           b.protocol(), kBaselineProtocol);
  }
  return "";
}

Baseline BuildBaseline(const BaselineMeasurement& bm, const ProfilerConfig& config) {
  Baseline b;
  b.set_task_id(bm.task_id());
  b.set_task_hash(bm.task_hash());
  b.set_gpu_model(bm.device().gpu_model());
  b.set_torch_version(bm.device().torch_version());
  b.set_input_policy_hash(bm.input_policy_hash());
  b.set_measured_at(bm.measured_at());
  b.set_error(bm.error());
  b.set_timing_path(bm.timing_path());
  b.set_protocol(bm.protocol());
  // Times taken while another process used the GPU are inflated by its
  // time-slices: such a baseline would pay every candidate a speed-up.
  for (const RawTimingRun* run : {&bm.eager(), &bm.compiled()}) {
    if (run->foreign_gpu_processes() > 0 && b.error().empty()) {
      b.set_error(absl::StrFormat("%s: device shared with %d other process(es) while timing (%s); measure again",
                                  run->label(), run->foreign_gpu_processes(), run->gpu_share_check()));
    }
  }
  if (bm.eager().samples_size() > 0 || !bm.eager().error().empty()) {
    *b.mutable_eager() = AnalyzeTimingRun(bm.eager(), config);
  }
  if (bm.compiled().samples_size() > 0 || !bm.compiled().error().empty()) {
    *b.mutable_compiled() = AnalyzeTimingRun(bm.compiled(), config);
  }
  if (bm.anchor().samples_size() > 0) {
    b.set_anchor_median_us(AnalyzeTimingRun(bm.anchor(), config).median_us());
  }
  b.set_speed_of_light_us(SpeedOfLightUs(bm.work(), bm.device(), config));
  return b;
}

}  // namespace kernelrl
