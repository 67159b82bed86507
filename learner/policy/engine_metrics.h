// The policy engine's state on /metrics (prometheus-cpp through
// common/metrics.h): KV blocks used/cached/total, running batch size and
// waiting requests (gauges), and prompt tokens, prefix-cache hits, computed
// prefill tokens, generated tokens and preemptions (counters). Values are
// read from PolicyEngine::GetInfo() by a collect hook just before each
// scrape, so the engine thread does no metrics work.
//
// The hook outlives nothing: destroying EngineMetrics detaches it from the
// engine (later scrapes leave the last values), so the engine may go first
// as long as EngineMetrics goes with it. Thread-safe.
#ifndef KERNELRL_LEARNER_POLICY_ENGINE_METRICS_H_
#define KERNELRL_LEARNER_POLICY_ENGINE_METRICS_H_

#include <memory>
#include <string>

#include "common/metrics.h"
#include "learner/policy/engine.h"

namespace kernelrl::learner {

class EngineMetrics {
 public:
  // `engine_label`: the value of every series' "engine" label (one engine
  // per GPU in a process: its device, say).
  EngineMetrics(const PolicyEngine* engine, MetricsRegistry* registry, const std::string& engine_label = "0");
  ~EngineMetrics();
  EngineMetrics(const EngineMetrics&) = delete;
  EngineMetrics& operator=(const EngineMetrics&) = delete;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace kernelrl::learner

#endif  // KERNELRL_LEARNER_POLICY_ENGINE_METRICS_H_
