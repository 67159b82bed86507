#include "profiler_service/speed_of_light.h"

#include <algorithm>

namespace kernelrl {

double SpeedOfLightUs(const WorkEstimate& work, const DeviceInfo& device,
                      const ProfilerConfig& config) {
  if (device.backend() == "cpu") return 0.0;
  const double spilled_output = std::max(0.0, work.output_bytes() - device.l2_bytes());
  const double bytes = work.input_bytes() + work.parameter_bytes() + spilled_output;
  // The faster of the configured ceiling and the device's own peak: a floor
  // taken at a slower rate than the device has flags its honest kernels.
  const double peak = std::max(config.peak_dram_bytes_per_s(), device.peak_dram_bytes_per_s());
  const double memory_s = peak > 0 ? bytes / peak : 0.0;
  const double compute_s = config.peak_flops() > 0 ? work.flops() / config.peak_flops() : 0.0;
  return std::max(memory_s, compute_s) * 1e6;
}

}  // namespace kernelrl
