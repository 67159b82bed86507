// Builders for raw harness measurements used by the analysis tests.
#ifndef KERNELRL_PROFILER_SERVICE_TEST_UTIL_H_
#define KERNELRL_PROFILER_SERVICE_TEST_UTIL_H_

#include <random>
#include <string>

#include "profiler_service/proto_types.h"

namespace kernelrl::testing_util {

// n blocks of 4 forwards around `us` per forward (relative noise `rel`): the
// trusted figure `us`, in-process cupti = us, events = cupti * event_factor,
// wall = events + 15 us.
inline RawTimingRun NoisyRun(double us, int n, double rel, unsigned seed,
                             double event_factor = 1.05, const std::string& backend = "cuda") {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(1.0, rel);
  RawTimingRun run;
  run.set_backend(backend);
  run.set_cupti_active(backend == "cuda");
  for (int i = 0; i < n; ++i) {
    CallSample* s = run.add_samples();
    const double t = us * noise(rng);
    s->set_cupti_us(backend == "cuda" ? t : 0);
    s->set_event_us(backend == "cuda" ? t * event_factor : 0);
    s->set_wall_us(backend == "cuda" ? t * event_factor + 15.0 : t);
    s->set_trusted_us(t);
    s->set_forwards(4);
    s->set_block_us(4 * (t * event_factor + 20.0));
  }
  return run;
}

inline void AddActivity(RawTimingRun* run, const std::string& name, double us, uint64_t stream = 7,
                        uint64_t thread = 100, const std::string& kind = "kernel") {
  KernelActivity* a = run->add_activities();
  a->set_name(name);
  a->set_kind(kind);
  a->set_stream_id(stream);
  a->set_thread_id(thread);
  a->set_count(10);
  a->set_total_us(us);
}

}  // namespace kernelrl::testing_util

#endif  // KERNELRL_PROFILER_SERVICE_TEST_UTIL_H_
