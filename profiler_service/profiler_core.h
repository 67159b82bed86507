// ProfilerCore: what the Profiler service does, without the network.
//
//  * Profile(request): judges the measurement the sandbox's trusted harness
//    recorded for an already-verified candidate
//    (<artifact_dir>/profile_measurement.json, kernelrl.v1.ProfileMeasurement
//    as proto3 JSON, see docs/HARNESS.md) against the cached baseline of the
//    task. It never runs candidate code: candidate code runs only inside the
//    sandbox, under its isolation.
//  * Baselines(request): cached eager / torch.compile baselines per task,
//    keyed by (task hash, GPU model, torch version, input policy hash); on a
//    miss (unless cache_only) it measures the task's reference with the
//    Python precompute in its own trusted process and caches the result.
//    The GPU model and torch version of the key are those this profiler's
//    harness reports (ProfilerConfig harness settings).
// Thread-safe: state is the on-disk cache plus metrics; concurrent misses of
// one task may both measure, and the later file replaces the earlier whole.
#ifndef KERNELRL_PROFILER_SERVICE_PROFILER_CORE_H_
#define KERNELRL_PROFILER_SERVICE_PROFILER_CORE_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "profiler_service/baseline_cache.h"
#include "profiler_service/proto_types.h"
#include "proto/profiler.pb.h"

namespace kernelrl {

class ProfilerCore {
 public:
  // `config` gets defaults applied; `gpu_model` / `torch_version` name the
  // device the baselines are for (from the harness's DeviceInfo).
  ProfilerCore(const ProfilerConfig& config, std::string gpu_model, std::string torch_version,
               MetricsRegistry* metrics);

  absl::StatusOr<ProfileResult> Profile(const v1::ProfileRequest& request);
  v1::BaselinesResponse Baselines(const v1::BaselinesRequest& request);

 private:
  absl::StatusOr<Baseline> MeasureBaseline(const Task& task);
  BaselineKey KeyFor(const Task& task) const;

  const ProfilerConfig config_;
  const std::string gpu_model_, torch_version_;
  BaselineCache cache_;
  Family<Counter>& profiles_;
  Family<Counter>& baseline_lookups_;
  Family<Histogram>& reward_;
};

}  // namespace kernelrl

#endif  // KERNELRL_PROFILER_SERVICE_PROFILER_CORE_H_
