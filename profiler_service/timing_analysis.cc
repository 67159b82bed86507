#include "profiler_service/timing_analysis.h"

#include <cmath>
#include <vector>

#include "profiler_service/stats.h"

namespace kernelrl {
namespace {

enum class Clock { kTrusted, kCupti, kEvents, kWall };

bool TrustedTimed(const RawTimingRun& run) {
  if (run.samples_size() == 0) return false;
  for (const CallSample& s : run.samples()) {
    if (!(s.trusted_us() > 0.0)) return false;
  }
  return true;
}

// The executor's own clock: attribution, never the figure that pays.
Clock InProcessClock(const RawTimingRun& run) {
  if (run.backend() == "cpu") return Clock::kWall;
  return run.cupti_active() ? Clock::kCupti : Clock::kEvents;
}

Clock PrimaryClock(const RawTimingRun& run) { return TrustedTimed(run) ? Clock::kTrusted : InProcessClock(run); }

double Value(const CallSample& s, Clock c) {
  switch (c) {
    case Clock::kTrusted: return s.trusted_us();
    case Clock::kCupti: return s.cupti_us();
    case Clock::kEvents: return s.event_us();
    case Clock::kWall: return s.wall_us();
  }
  return 0.0;
}

std::vector<double> Column(const RawTimingRun& run, Clock c) {
  std::vector<double> out;
  for (const CallSample& s : run.samples()) out.push_back(Value(s, c));
  return out;
}

}  // namespace

std::vector<double> PrimarySamples(const RawTimingRun& run, bool drop_throttled, int min_samples) {
  const Clock c = PrimaryClock(run);
  std::vector<double> all, unthrottled;
  for (const CallSample& s : run.samples()) {
    all.push_back(Value(s, c));
    if (!s.throttled()) unthrottled.push_back(Value(s, c));
  }
  if (drop_throttled && static_cast<int>(unthrottled.size()) >= min_samples) return unthrottled;
  return all;
}

namespace {

// The run's samples of one mode (graph-replayed blocks or eager ones).
RawTimingRun OfMode(const RawTimingRun& run, bool graph) {
  RawTimingRun out = run;
  out.clear_samples();
  for (const CallSample& s : run.samples()) {
    if (s.graph() == graph) *out.add_samples() = s;
  }
  return out;
}

}  // namespace

TimingStats AnalyzeTimingRun(const RawTimingRun& all, const ProfilerConfig& config) {
  // Eager blocks give every figure below; graph-replayed ones only their own median.
  const RawTimingRun graph = OfMode(all, true);
  const RawTimingRun run = OfMode(all, false);
  TimingStats st;
  *st.mutable_copies() = all.copies();
  if (graph.samples_size() > 0) {
    const std::vector<double> g = PrimarySamples(graph, true, config.min_samples());
    st.set_graph_median_us(Median(g));
    st.set_graph_samples(graph.samples_size());
    const double grse = RelStdError(g);
    st.set_graph_rel_std_error(std::isfinite(grse) ? grse : 1.0);
  }
  if (!run.error().empty()) st.add_flags("run_error");
  if (run.samples_size() == 0) {
    st.add_flags("no_samples");
    return st;
  }
  const std::vector<double> primary = PrimarySamples(run, true, config.min_samples());
  st.set_median_us(Median(primary));
  st.set_mean_us(Mean(primary));
  const double rse = RelStdError(primary);
  st.set_rel_std_error(std::isfinite(rse) ? rse : 1.0);
  st.set_samples(run.samples_size());
  int throttled = 0;
  for (const CallSample& s : run.samples()) throttled += s.throttled();
  st.set_throttled_samples(throttled);

  const bool cuda = run.backend() != "cpu";
  const double events = cuda ? Median(Column(run, Clock::kEvents)) : 0.0;
  const double wall = Median(Column(run, Clock::kWall));
  st.set_event_median_us(events);
  st.set_wall_median_us(wall);
  st.set_in_process_median_us(Median(Column(run, InProcessClock(run))));
  if (!TrustedTimed(run)) st.add_flags("untrusted_timing");

  if (!(rse <= config.target_rel_std_error())) st.add_flags("rse_above_target");
  if (throttled > config.max_throttled_fraction() * run.samples_size()) st.add_flags("throttled");
  if (run.recheck_failures() > 0) st.add_flags("recheck_failed");
  if (run.foreign_gpu_processes() > 0) st.add_flags("device_shared");
  if (!cuda) return st;

  if (run.dropped_records() > 0) st.add_flags("cupti_records_dropped");
  if (!run.cupti_active()) {
    st.add_flags("cupti_inactive");
  } else {
    const double cupti = Median(Column(run, Clock::kCupti));
    const double tol = config.events_cupti_tolerance();
    if (events < cupti * (1.0 - tol)) st.add_flags("events_below_cupti");
    if (events > cupti * (1.0 + tol)) st.add_flags("events_above_cupti");
  }
  // Events are recorded inside the wall-clock interval, so wall >= events
  // (2 us of slack for the clocks' resolution).
  if (wall + 2.0 < events) st.add_flags("wall_below_events");
  if (wall > 0 && (wall - events) / wall > config.wall_events_tolerance()) {
    st.add_flags("wall_vs_events_mismatch");
  }
  return st;
}

}  // namespace kernelrl
