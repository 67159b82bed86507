#include "learner/sync/weight_sink.h"

#include "learner/policy/engine.h"

namespace kernelrl::learner {

absl::Status EngineWeightSink::PublishModel(const Transformer& policy, int64_t version) {
  for (PolicyEngine* e : engines_) {
    if (auto s = e->SwapWeightsFromModel(policy, version); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status EngineWeightSink::Publish(const std::string& hf_dir, int64_t version) {
  for (PolicyEngine* e : engines_) {
    if (auto s = e->SwapWeightsFrom(hf_dir, version); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace kernelrl::learner
