// WeightSink: where each committed policy version goes so rollouts sample
// from it. One interface, one file per destination:
//   * EngineWeightSink (this file): the learner's built-in engine, hot-swapped
//     in process (learner/policy/engine.h), from a directory or from the
//     trainer's weights in memory.
//   * ExternalWeightSync (external_weight_sync.h): SGLang or vLLM servers,
//     each told to load the checkpoint directory from disk.
//   * CollectiveWeightSink (replica_weight_sync.h): engine replicas in other
//     processes, over a c10d group (NCCL), no disk.
// WeightSinks (this file) publishes to several of them in turn.
//
// Contract: Publish(dir, v) returns OK only once every destination serves
// the weights in `dir` stamped as version v (requests that arrive after it
// returns are served by v; earlier ones may still finish on older weights,
// each stamped with the version that served it). Not thread-safe: the job
// runner publishes from one thread.
#ifndef KERNELRL_LEARNER_SYNC_WEIGHT_SINK_H_
#define KERNELRL_LEARNER_SYNC_WEIGHT_SINK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace kernelrl::learner {

class PolicyEngine;
class Transformer;
namespace dist {
class ShardedWeights;
}  // namespace dist

class WeightSink {
 public:
  virtual ~WeightSink() = default;
  // `hf_dir`: a Hugging Face checkpoint directory (config.json + safetensors).
  virtual absl::Status Publish(const std::string& hf_dir, int64_t version) = 0;
  // Destinations that can take the weights from memory (then the job writes
  // no export between full checkpoints): a resident policy, copied before
  // this returns, so the caller may update it at once.
  virtual bool takes_models() const { return false; }
  virtual absl::Status PublishModel(const Transformer& policy, int64_t version) {
    (void)policy, (void)version;
    return absl::UnimplementedError("this weight sink takes checkpoint directories only");
  }
  // Destinations that take a sharded policy from its shards (no whole copy
  // anywhere): rank 0 calls PublishShards while every other rank of its
  // shard group joins the gathers (collective_weight_sync.h SendWeights).
  virtual bool takes_shards() const { return false; }
  virtual absl::Status PublishShards(dist::ShardedWeights& weights, int64_t version) {
    (void)weights, (void)version;
    return absl::UnimplementedError("this weight sink does not take shards");
  }
};

// The built-in engines (the learner's replicas): each loads `hf_dir` onto
// its own device on the caller's thread, then swaps it in between batches
// (PolicyEngine::SwapWeightsFrom).
class EngineWeightSink final : public WeightSink {
 public:
  explicit EngineWeightSink(std::vector<PolicyEngine*> engines) : engines_(std::move(engines)) {}
  explicit EngineWeightSink(PolicyEngine* engine) : engines_{engine} {}
  absl::Status Publish(const std::string& hf_dir, int64_t version) override;
  // Each engine copies the weights onto its device (no disk).
  bool takes_models() const override { return true; }
  absl::Status PublishModel(const Transformer& policy, int64_t version) override;

 private:
  const std::vector<PolicyEngine*> engines_;
};

// Several destinations, published to in order; the first failure ends the
// publication (its destinations after it keep the older version). Takes
// models when every destination does.
class WeightSinks final : public WeightSink {
 public:
  explicit WeightSinks(std::vector<std::unique_ptr<WeightSink>> sinks) : sinks_(std::move(sinks)) {}
  absl::Status Publish(const std::string& hf_dir, int64_t version) override {
    for (auto& s : sinks_) {
      if (auto st = s->Publish(hf_dir, version); !st.ok()) return st;
    }
    return absl::OkStatus();
  }
  bool takes_models() const override {
    for (const auto& s : sinks_) {
      if (!s->takes_models()) return false;
    }
    return !sinks_.empty();
  }
  absl::Status PublishModel(const Transformer& policy, int64_t version) override {
    for (auto& s : sinks_) {
      if (auto st = s->PublishModel(policy, version); !st.ok()) return st;
    }
    return absl::OkStatus();
  }
  bool takes_shards() const override {
    for (const auto& s : sinks_) {
      if (!s->takes_shards()) return false;
    }
    return !sinks_.empty();
  }
  absl::Status PublishShards(dist::ShardedWeights& weights, int64_t version) override {
    for (auto& s : sinks_) {
      if (auto st = s->PublishShards(weights, version); !st.ok()) return st;
    }
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<WeightSink>> sinks_;
};

}  // namespace kernelrl::learner

#endif  // KERNELRL_LEARNER_SYNC_WEIGHT_SINK_H_
