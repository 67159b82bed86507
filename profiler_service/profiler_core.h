// ProfilerCore: what the Profiler service does, without the network.
//
//  * Baselines(request): cached eager / torch.compile baselines per task,
//    keyed by BaselineKeyFor(task, declared device, GPU model, torch version)
//    (task_key.h): the task hash is recomputed from the reference source,
//    never taken from the request, so a baseline served here is the one the
//    sandbox's profile stage reads for the same task. On a miss (unless
//    cache_only) it measures the task's reference with the Python precompute
//    in its own trusted process and caches the result. The GPU model and
//    torch version of the key come from ProfilerConfig (gpu_model,
//    torch_version), as this profiler's harness reports them.
//
// Candidates are judged in one place only: the sandbox's profile stage calls
// JudgeProfile (judge.h) with the baseline it reads from the same cache. The
// profiler never runs or judges candidate code.
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

  v1::BaselinesResponse Baselines(const v1::BaselinesRequest& request);

 private:
  absl::StatusOr<Baseline> MeasureBaseline(const Task& task, const BaselineKey& key);
  BaselineKey KeyFor(const Task& task) const;

  const ProfilerConfig config_;
  const std::string gpu_model_, torch_version_;
  BaselineCache cache_;
  Family<Counter>& baseline_lookups_;
};

}  // namespace kernelrl

#endif  // KERNELRL_PROFILER_SERVICE_PROFILER_CORE_H_
