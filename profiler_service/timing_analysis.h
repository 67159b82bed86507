// TimingAnalysis turns one RawTimingRun (what the harness measured for one
// callable) into TimingStats: medians of the three clocks, the relative
// standard error, throttled-sample count and the timing flags.
//
// The reported time (TimingStats.median_us) is the median per-call CUPTI sum
// over all streams on the CUDA backend, the CUDA-event median when CUPTI was
// not active, and the host wall-clock median on the CPU backend. Samples taken
// while NVML reported throttling are left out of the medians when at least
// min_samples unthrottled samples remain (and counted either way).
//
// Flags (see docs/PROFILER.md for their severity):
//   no_samples, run_error, rse_above_target, throttled, recheck_failed,
//   device_shared        (another process did GPU work while the blocks ran),
//   events_below_cupti   (the harness stream's events saw less than the GPU did:
//                         work on another stream or escaped the event range),
//   events_above_cupti   (launch/host gaps between kernels; informational),
//   wall_below_events    (host clock shorter than device events: clock anomaly),
//   wall_vs_events_mismatch (host time dominates; informational),
//   cupti_inactive, cupti_records_dropped.
#ifndef KERNELRL_PROFILER_SERVICE_TIMING_ANALYSIS_H_
#define KERNELRL_PROFILER_SERVICE_TIMING_ANALYSIS_H_

#include "profiler_service/proto_types.h"

namespace kernelrl {

// `config` must already carry defaults (WithProfilerDefaults).
TimingStats AnalyzeTimingRun(const RawTimingRun& run, const ProfilerConfig& config);

// The per-call values TimingStats.median_us is taken over (see above).
std::vector<double> PrimarySamples(const RawTimingRun& run, bool drop_throttled, int min_samples);

}  // namespace kernelrl

#endif  // KERNELRL_PROFILER_SERVICE_TIMING_ANALYSIS_H_
