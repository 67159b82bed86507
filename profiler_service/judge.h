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
//   kDecline -> outcome INFRA_ERROR: the device could not be measured as the
//              baseline was (drift anchor off, clocks throttled, another
//              process's GPU work time-slicing with ours): the worker
//              declines to judge rather than blame or pay the candidate;
//   kInfo   -> reported only.
// The candidate was verified correct before profiling; this only judges speed
// and integrity. The time judged is the trusted per-forward figure
// (TimingStats.median_us): the reference process's own clock around blocks of
// forwards, which the candidate's process cannot alter; its in-process figures
// only attribute GPU time (coverage, library policy) and are compared with the
// trusted one for the record ("in_process_below_trusted", info).
#ifndef KERNELRL_PROFILER_SERVICE_JUDGE_H_
#define KERNELRL_PROFILER_SERVICE_JUDGE_H_

#include <string>

#include "profiler_service/proto_types.h"

namespace kernelrl {

enum class FlagSeverity { kInfo, kAudit, kDecline, kHack };
FlagSeverity SeverityOf(const std::string& flag);

// The summary of a judged OK verdict: "12.3 us; 1.50x eager, 1.20x compile". The time shown is the
// one its eager speed-up was computed from (eager_basis: graph-replayed where both sides were), so
// that the time and the ratio beside it agree; the launched median where no basis was recorded.
std::string JudgedOk(const Verdict& v, bool quarantined);

// `baseline` may be null (no baseline: speed-ups 0, flag "baseline_missing").
// `config` must carry defaults.
ProfileResult JudgeProfile(const ProfileMeasurement& m, const Baseline* baseline,
                           const Task& task, const ProfilerConfig& config);

// What is added to each side's figure so that both had the reference's
// in-clock input copy taken off at the same rate: the faster of the two
// workers' probed rates, so neither side has more taken off than its copy
// costs at the better measurement. Each worker probes its own at start, and
// two workers on one H200 differed by 5%: with the baseline timed by one and
// the candidate by the other, an honest kernel 3.6% slower than eager's was
// paid 1.10-1.14x (docs/HARNESS.md). The seal is taken off at its own GPU
// time in each block (CallSample.seal_off_us), not at a probe's rate.
// Zero where either side has no rates.
struct CopyOffsets {
  double candidate_us = 0.0;
  double baseline_us = 0.0;
};
CopyOffsets CommonCopyOffsets(const CopyRates& candidate, const CopyRates& baseline);

// The protocol baselines are measured under (Baseline.protocol); one measured
// under an older one is not compared with. 2: a graph block's first replay is
// untimed, and torch.compile's Triton configs are chosen by the measuring
// process alone, not kept from a warm-up that chose them beside other workers
// (docs/PROFILER.md). 3: the drift anchor is timed behind a running copy
// (device time alone; before, an idle device's clock ramp), so an anchor of
// protocol 2 is not comparable with a candidate's.
inline constexpr int kBaselineProtocol = 3;

// Baseline entry from a precompute measurement (same timing analysis).
Baseline BuildBaseline(const BaselineMeasurement& bm, const ProfilerConfig& config);

// Why a cached baseline is not compared with, "" when it is: it recorded an
// error, has no eager time, was timed in the precompute's own process (not
// the call path, clock and overheads a candidate is timed with), or under an
// older protocol. The profile stage then judges without it (baseline_missing).
std::string WhyBaselineDoesNotPay(const Baseline& b);

}  // namespace kernelrl

#endif  // KERNELRL_PROFILER_SERVICE_JUDGE_H_
