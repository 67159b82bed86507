// Decode steps at fixed shapes, replayed from CUDA graphs: one graph per
// (batch bucket, block-table bucket), both powers of two, captured on first
// use. A step of B sequences whose longest needs M blocks runs the graph of
// the smallest buckets >= (B, M): padding rows decode token 0 at position 0
// into a scratch block no sequence owns (`trash_block`), and table entries
// past a sequence's blocks point at it too (masked out by position). The
// graph's inputs are static device buffers filled by one host-to-device
// copy; its output is the hidden states, and the caller's eager code turns
// the real rows into logits.
//
// The step is Transformer::PagedDecodeHidden, the same code the eager path
// runs. A capture that fails (an op that cannot be captured, out of memory)
// is logged once and turns the graphs off: Decode() then returns nullopt and
// the caller decodes eagerly. On a CPU model nothing is captured and the
// same fixed-shape step runs eagerly (what the CPU tests exercise).
//
// Captured graphs hold the model's weights and the cache by address: a new
// model or cache needs a new DecodeGraphs. Engine thread only.
#ifndef KERNELRL_LEARNER_POLICY_DECODE_GRAPHS_H_
#define KERNELRL_LEARNER_POLICY_DECODE_GRAPHS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "learner/model.h"

namespace at::cuda {
struct CUDAGraph;
}  // namespace at::cuda

namespace kernelrl::learner {

class DecodeGraphs {
 public:
  // max_blocks: the most blocks one sequence can have (bounds the table bucket).
  DecodeGraphs(const Transformer* model, PagedKVCache* cache, int64_t trash_block, int64_t max_blocks);
  ~DecodeGraphs();

  // Logits [B,V] fp32 of one decode step (ids[i] at position positions[i]
  // of a sequence with block table tables[i]), or nullopt when the graphs
  // are off (the caller runs PagedForward).
  std::optional<at::Tensor> Decode(const std::vector<int64_t>& ids, const std::vector<int64_t>& positions,
                                   const std::vector<std::vector<int32_t>>& tables);

  bool failed() const { return failed_; }
  int captured() const;  // Graphs captured (0 on CPU).

 private:
  struct Graph {
    at::Tensor inputs;  // [4 parts] int64 on the device: ids B | positions B | write B | table B*M.
    at::Tensor hidden;  // [B,H] output.
    std::unique_ptr<at::cuda::CUDAGraph> graph;  // Null on CPU.
  };
  // Runs (or captures) the step for buckets (b, m) on the filled inputs.
  at::Tensor Run(Graph* g, int64_t b, int64_t m);

  const Transformer* model_;
  PagedKVCache* cache_;
  const int64_t trash_block_;
  const int64_t max_blocks_;
  const bool capture_;
  bool failed_ = false;
  c10::MempoolId_t pool_{0, 0};  // Shared by every graph (captures run one at a time).
  std::map<std::pair<int64_t, int64_t>, Graph> graphs_;
};

}  // namespace kernelrl::learner

#endif  // KERNELRL_LEARNER_POLICY_DECODE_GRAPHS_H_
