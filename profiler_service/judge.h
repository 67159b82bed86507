// The profiler's judgement: from what the harness measured (ProfileMeasurement)
// and the cached baselines to a ProfileResult whose Verdict carries times,
// speed-ups, speed-of-light ratio, coverage, flags, quarantine and outcome.
// The reward follows from those alone (RewardFor, reward.h; the sandbox worker
// applies it), so the judge sets none.
//
// Every flag has one severity (FlagSeverity), and severities decide the outcome:
//   kHack   -> outcome HACK_DETECTED (the candidate did not do the work
//              itself, or its timed outputs were wrong: recheck_failed gives
//              WRONG_ANSWER);
//   kAudit  -> outcome OK, quarantined = true (reward held at 1 or less until
//              an audit releases it);
//   kInfo   -> reported only.
// The candidate was verified correct before profiling; this only judges speed
// and integrity.
#ifndef KERNELRL_PROFILER_SERVICE_JUDGE_H_
#define KERNELRL_PROFILER_SERVICE_JUDGE_H_

#include <string>

#include <vector>

#include "absl/status/statusor.h"
#include "profiler_service/proto_types.h"

namespace kernelrl {

enum class FlagSeverity { kInfo, kAudit, kHack };
FlagSeverity SeverityOf(const std::string& flag);

// The outside-clock bound (docs/HARNESS.md "Trust boundary"): the least
// per-call time the driving process's own clock allows, from the samples'
// outside_us, the calibrated per-call overhead and the output hand-over.
// measured is false when no sample was driven from outside.
struct OutsideBound {
  bool measured = false;
  double median_outside_us = 0.0;  // first quartile, in fact (see judge.cc)
  double bound_us = 0.0;
};
OutsideBound BoundByOutsideClock(const RawTimingRun& run, const ProfilerConfig& config);

// The per-call overhead of the outside clock, calibrated by the trusted side
// from runs of a known-honest candidate through the same executor path: per
// run, q25(outside) - hand-over - in-process median (the overhead that makes
// the bound equal that run's own figure); the largest over the runs, raised by
// outside_calibration_margin. An error when no run was driven from outside or
// the overhead comes out non-positive (clocks that do not add up).
absl::StatusOr<double> CalibrateOutsideOverhead(const std::vector<RawTimingRun>& runs,
                                                const ProfilerConfig& config);

// `baseline` may be null (no baseline: speed-ups 0, flag "baseline_missing").
// `config` must carry defaults.
ProfileResult JudgeProfile(const ProfileMeasurement& m, const Baseline* baseline,
                           const Task& task, const ProfilerConfig& config);

// Baseline entry from a precompute measurement (same timing analysis).
Baseline BuildBaseline(const BaselineMeasurement& bm, const ProfilerConfig& config);

}  // namespace kernelrl

#endif  // KERNELRL_PROFILER_SERVICE_JUDGE_H_
