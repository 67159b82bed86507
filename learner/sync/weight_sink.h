// WeightSink: where each committed policy version goes so rollouts sample
// from it. One interface, one file per destination:
//   * EngineWeightSink (this file): the learner's built-in engine, hot-swapped
//     in process (learner/policy/engine.h).
//   * ExternalWeightSync (external_weight_sync.h): SGLang or vLLM servers,
//     each told to load the checkpoint directory from disk.
//
// Contract: Publish(dir, v) returns OK only once every destination serves
// the weights in `dir` stamped as version v (requests that arrive after it
// returns are served by v; earlier ones may still finish on older weights,
// each stamped with the version that served it). Not thread-safe: the job
// runner publishes from one thread.
#ifndef KERNELRL_LEARNER_SYNC_WEIGHT_SINK_H_
#define KERNELRL_LEARNER_SYNC_WEIGHT_SINK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace kernelrl::learner {

class PolicyEngine;

class WeightSink {
 public:
  virtual ~WeightSink() = default;
  // `hf_dir`: a Hugging Face checkpoint directory (config.json + safetensors).
  virtual absl::Status Publish(const std::string& hf_dir, int64_t version) = 0;
};

// The built-in engines (the learner's replicas): each loads `hf_dir` onto
// its own device on the caller's thread, then swaps it in between batches
// (PolicyEngine::SwapWeightsFrom).
class EngineWeightSink final : public WeightSink {
 public:
  explicit EngineWeightSink(std::vector<PolicyEngine*> engines) : engines_(std::move(engines)) {}
  explicit EngineWeightSink(PolicyEngine* engine) : engines_{engine} {}
  absl::Status Publish(const std::string& hf_dir, int64_t version) override;

 private:
  const std::vector<PolicyEngine*> engines_;
};

}  // namespace kernelrl::learner

#endif  // KERNELRL_LEARNER_SYNC_WEIGHT_SINK_H_
