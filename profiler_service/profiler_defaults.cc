#include "profiler_service/profiler_defaults.h"

namespace kernelrl {
ProfilerConfig WithProfilerDefaults(ProfilerConfig c) {
  auto d = [](double v, double current) { return current == 0.0 ? v : current; };
  c.set_target_rel_std_error(d(0.01, c.target_rel_std_error()));
  c.set_time_budget_s(d(2.0, c.time_budget_s()));
  if (c.min_samples() == 0) c.set_min_samples(10);
  if (c.max_samples() == 0) c.set_max_samples(1000);
  if (c.warmup_calls() == 0) c.set_warmup_calls(3);
  c.set_recheck_fraction(d(0.1, c.recheck_fraction()));
  c.set_l2_flush_multiple(d(2.0, c.l2_flush_multiple()));
  if (c.interleave_blocks() == 0) c.set_interleave_blocks(4);
  c.set_min_own_kernel_share(d(0.5, c.min_own_kernel_share()));
  c.set_events_cupti_tolerance(d(0.25, c.events_cupti_tolerance()));
  c.set_wall_events_tolerance(d(0.9, c.wall_events_tolerance()));
  c.set_quarantine_speedup(d(20.0, c.quarantine_speedup()));
  c.set_speed_of_light_margin(d(0.9, c.speed_of_light_margin()));
  c.set_peak_dram_bytes_per_s(d(3.0e12, c.peak_dram_bytes_per_s()));
  c.set_peak_flops(d(8.0e14, c.peak_flops()));
  c.set_max_throttled_fraction(d(0.2, c.max_throttled_fraction()));
  c.set_anchor_drift_tolerance(d(0.10, c.anchor_drift_tolerance()));
  c.set_outside_window_tolerance(d(0.05, c.outside_window_tolerance()));
  c.set_milestone_margin(d(0.05, c.milestone_margin()));
  if (c.min_rechecks() == 0) c.set_min_rechecks(5);
  c.set_block_target_us(d(30000.0, c.block_target_us()));
  if (c.max_forwards_per_block() <= 0) c.set_max_forwards_per_block(256);
  if (c.block_memory_bytes() <= 0) c.set_block_memory_bytes(int64_t{64} << 30);
  c.set_graph_below_us(d(2000.0, c.graph_below_us()));
  if (c.max_forwards_per_graph_block() <= 0) c.set_max_forwards_per_graph_block(1024);
  c.set_gpu_lease_sample_lag_s(d(2.0, c.gpu_lease_sample_lag_s()));
  if (c.baseline_cache_dir().empty()) c.set_baseline_cache_dir("/var/cache/kernelrl/baselines");
  if (c.harness_python().empty()) c.set_harness_python("python3");
  return c;
}

}  // namespace kernelrl
