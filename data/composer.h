// The rule-based composer: candidate i of a run is Compose(i), a pure function
// of (seed, i) and the catalogue, so a killed run resumes where it stopped and
// two runs with one seed produce the same candidates.
//
// Compose draws how many operators to stack (SamplerConfig.op_count_weights,
// 1..5) or, with probability transformers_share, one standalone transformers
// module (never combined with others). Operators follow one another only where
// the next one's shape rule accepts the running shape (data/shapes.h). The
// batch is then sized so the roofline estimate on the target device lands on
// a log-uniform draw from [min_target_ms, max_target_ms], within
// max_tensor_bytes per activation, and the KernelBench source is written:
// Model (operators built in __init__, called in forward with shape comments),
// get_inputs(), get_init_inputs().
//
// Thread-safety: const after construction; Compose may run on many threads.
#ifndef KERNELRL_DATA_COMPOSER_H_
#define KERNELRL_DATA_COMPOSER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/data.pb.h"
#include "data/rng.h"
#include "data/shapes.h"

namespace kernelrl {

using ::kernelrl::v1::OpCatalogue;
using ::kernelrl::v1::SamplerConfig;
using ::kernelrl::v1::TargetDevice;
using ::kernelrl::v1::TransformersModule;

struct ComposedTask {
  int64_t index = 0;
  std::string id;
  std::string source;
  std::vector<std::string> operators;  // OpSpec names (or "transformers:<Class>").
  bool transformers = false;
  std::string composer = "rule";
  double estimated_ms = 0;
  // Device memory of the probe, estimated: parameters, inputs and three times
  // the largest activation (SamplerConfig.max_task_bytes caps it).
  int64_t estimated_peak_bytes = 0;
  Shape input_shape;                   // First get_inputs() tensor.
  Shape output_shape;                  // Predicted; the crawl checks it against torch.
};

// How a composed task is sized.
struct Sizing {
  bool size_batch = true;   // false: batch 1 (crawl probes).
  double max_flops = 0;     // > 0: redraw input shapes above these (crawl probes on a CPU).
  double max_bytes = 0;
};

class Composer {
 public:
  Composer(OpCatalogue catalogue, SamplerConfig sampler, TargetDevice target, uint64_t seed,
           std::string id_prefix);

  absl::StatusOr<ComposedTask> Compose(int64_t index) const;

  // Stacks exactly these operators in order (the LLM composer's proposals, the crawl, tests).
  absl::StatusOr<ComposedTask> ComposeSequence(int64_t index, const std::vector<std::string>& names, Rng* rng,
                                               const Sizing& sizing) const;
  absl::StatusOr<ComposedTask> ComposeTransformers(int64_t index, const TransformersModule& module, Rng* rng,
                                                   const Sizing& sizing) const;

  // The number of operators candidate `index` asks for (0 = transformers); the
  // LLM composer uses the same draw so the Table-3 mix does not depend on it.
  int DrawOperatorCount(Rng* rng) const;
  std::vector<std::string> OperatorNames() const;
  const OpCatalogue& catalogue() const { return catalogue_; }

 private:
  absl::StatusOr<std::vector<std::string>> DrawSequence(int count, Rng* rng) const;
  double EstimateMs(double bytes, double flops) const;

  OpCatalogue catalogue_;
  SamplerConfig sampler_;
  TargetDevice target_;
  uint64_t seed_;
  std::string id_prefix_;
  std::map<std::string, int> by_name_;  // name -> index in catalogue_.ops()
};

// "Conv2d" -> "conv2d", "torch.softmax" -> "softmax": ids and attribute names.
std::string ShortName(const std::string& op_name);

}  // namespace kernelrl

#endif  // KERNELRL_DATA_COMPOSER_H_
