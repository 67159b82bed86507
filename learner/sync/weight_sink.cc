#include "learner/sync/weight_sink.h"

#include "learner/policy/engine.h"

namespace kernelrl::learner {

absl::Status EngineWeightSink::Publish(const std::string& hf_dir, int64_t version) {
  return engine_->SwapWeightsFrom(hf_dir, version);
}

}  // namespace kernelrl::learner
