// The speed-of-light floor of one call: the least time any implementation
// needs, from the bytes it must move through DRAM and the FLOPs it must do at
// the device's measured peak rates:
//   bytes = inputs + parameters (the L2 was flushed, so both come from DRAM)
//           + outputs beyond what the L2 can hold at the end of the call;
//   floor = max(bytes / peak_dram_bytes_per_s, flops / peak_flops).
// peak_flops is the fastest honest rate (dense bf16 tensor cores), so an fp32
// task done in tf32/bf16 within tolerance still sits above the floor. A
// measured time below margin * floor cannot be honest work and is flagged
// "below_speed_of_light" (audit, never a reward). Algebraic shortcuts that
// skip reference FLOPs can trip it too: that is what the audit is for.
#ifndef KERNELRL_PROFILER_SERVICE_SPEED_OF_LIGHT_H_
#define KERNELRL_PROFILER_SERVICE_SPEED_OF_LIGHT_H_

#include "profiler_service/proto_types.h"

namespace kernelrl {

// Floor in microseconds; 0 when nothing is known (CPU backend, empty work).
double SpeedOfLightUs(const WorkEstimate& work, const DeviceInfo& device,
                      const ProfilerConfig& config);

}  // namespace kernelrl

#endif  // KERNELRL_PROFILER_SERVICE_SPEED_OF_LIGHT_H_
