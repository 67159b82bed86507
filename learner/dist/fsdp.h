// Fully sharded data parallelism (ZeRO-3 / FSDP semantics) for a
// Transformer over a c10d backend (ProcessGroupNCCL on GPUs).
//
// A model is cut into units: the root (embedding, final norm, heads) and one
// unit per block. Each unit's weights are one flat fp32 buffer of N
// elements, padded to P = W * ceil(N / W) for W ranks; rank r keeps elements
// [r P/W, (r+1) P/W) — its master shard, the leaf the optimizer updates —
// and nothing else. Gradients and AdamW moments exist only for the shard.
//
//   forward, block l:   all-gather unit l+1 in the compute dtype (bf16 on
//                       GPU), prefetch unit l+2, run the block on views of
//                       the gathered buffer
//   backward, block l:  (checkpointed) all-gather again, prefetch the block
//                       before it, recompute, reduce-scatter the buffer's
//                       fp32 gradient into the shard's .grad
//   optimizer:          gradient norm over all shards (one all-reduce),
//                       clip, AdamW on the shards
//
// Memory: with ModelOptions::activation_checkpointing, a block's gathered
// weights exist while it runs forward and again while it runs backward (plus
// the one prefetched). Without it, autograd keeps every gathered block for
// backward (the optimizer state and gradients stay sharded). The root is
// gathered once per forward pass and kept until that pass's backward.
// Reduce-scatters run asynchronously: one is in flight while the next
// block's backward computes (NCCL's own stream), and each is added into
// .grad when the next is issued or when the optimizer steps.
//
// LoRA (a model with adapters, ModelOptions::lora_rank): each unit has a
// second flat buffer, its frozen part (the base weights), sharded the same
// way but kept in the compute dtype and gathered beside the trainable part;
// it takes no gradient, no reduce-scatter, no master copy and no optimizer
// state. The trainable part is the adapters (and a value model's head).
//
// Hybrid sharding (shard within a host, replicate across hosts): with a
// replicate group, the units are sharded over the shard group only (W = its
// size), and each reduce-scattered gradient shard is then summed over the
// replicate group (the ranks holding the same shard on other hosts); the
// weights and optimizer state stay equal across replicas.
//
// Every rank must run the same forward/backward passes in the same order:
// each pass's gathers and reduce-scatters are collectives (the trainer pads
// ranks with fewer rows with empty passes).
//
// Not thread-safe: one thread drives a model and its optimizer.
#ifndef KERNELRL_LEARNER_DIST_FSDP_H_
#define KERNELRL_LEARNER_DIST_FSDP_H_

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <deque>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/json.h"
#include "learner/model.h"
#include "learner/rl/trainer.h"

namespace kernelrl::learner::dist {

class ShardedWeights : public WeightProvider {
 public:
  // Takes `model`'s resident weights (any device and dtype; fp32 gives exact
  // masters), keeps this rank's shard of each unit as fp32 on `device` and
  // hands the model to it: the model then computes in `dtype` on `device`.
  // Every rank must pass the same weights. `backend`: the shard group;
  // `replicate` (optional): the group of ranks holding the same shard
  // (hybrid sharding). Returns the provider, owned by the model.
  static absl::StatusOr<ShardedWeights*> Shard(Transformer& model, c10::intrusive_ptr<c10d::Backend> backend,
                                               at::Device device, at::ScalarType dtype,
                                               c10::intrusive_ptr<c10d::Backend> replicate = {});

  RootWeights Root() override;
  at::Tensor Block(const Transformer& model, int layer, const at::Tensor& x, const at::Tensor& cos,
                   const at::Tensor& sin, const std::vector<int64_t>& lengths) override;
  // The master shards, one per unit (root first): fp32 [P/W] leaves. A
  // unit without trainable weights has an empty shard.
  std::vector<at::Tensor> parameters() const override { return shards_; }
  // The frozen shards, one per unit, compute dtype (empty without adapters).
  const std::vector<at::Tensor>& frozen_shards() const { return frozen_shards_; }
  std::vector<at::Tensor>& mutable_frozen_shards() { return frozen_shards_; }

  // Adds the reduce-scatters still in flight into the shards' .grad and
  // drops prefetched gathers (the weights are about to change).
  void FinishGradients();
  // Sum over ranks, in place (the optimizer's gradient norm).
  void AllReduceSum(at::Tensor& t);
  // Per unit, shard ranges [begin, end): the weights that take weight decay
  // (matrices other than the embedding and the value head) and the value
  // head's (it learns at head_lr_scale x lr): the rule of the resident AdamW.
  using Ranges = std::vector<std::vector<std::pair<int64_t, int64_t>>>;
  const Ranges& decay_ranges() const { return decay_ranges_; }
  const Ranges& head_ranges() const { return head_ranges_; }

  // Writes a value head (weight [1, hidden], bias [1]; the same on every
  // rank) into this rank's part of the root's master shard. No collective.
  absl::Status SetValueHead(const at::Tensor& weight, const at::Tensor& bias);

  // The whole model, fp32 on the CPU (every rank of the shard group calls
  // it; a rank that does not `keep` it gets null and holds one gathered unit
  // at a time): export to Hugging Face safetensors and tests.
  absl::StatusOr<std::unique_ptr<Transformer>> Consolidate(bool keep = true) const;

  // The unit layout as JSON (model config, head, tying, world size, each
  // unit's sizes and field shapes): what a sharded checkpoint records, so
  // that its shards can be consolidated without a process group.
  Json Layout() const;
  // A resident model from a Layout() and each unit's full flat buffers
  // (at least the unit's numel and frozen_numel elements; `frozen` empty
  // when the layout has no frozen part): Consolidate()'s second half.
  static absl::StatusOr<std::unique_ptr<Transformer>> Assemble(const Json& layout, const std::vector<at::Tensor>& units,
                                                               const std::vector<at::Tensor>& frozen,
                                                               const ModelOptions& options);

  int rank() const { return rank_; }        // In the shard group.
  int world_size() const { return world_; }  // Of the shard group.
  int replica() const { return replicate_ ? replicate_->getRank() : 0; }
  int64_t unit_count() const { return static_cast<int64_t>(units_.size()); }
  // Unpadded elements of a unit (N above), of its trainable and frozen parts.
  int64_t unit_numel(int64_t unit) const { return units_[unit].numel; }
  int64_t unit_frozen_numel(int64_t unit) const { return units_[unit].frozen_numel; }

  // A unit's gathered buffers, compute dtype: trainable [P] and frozen
  // (empty without adapters).
  struct Full {
    at::Tensor train, frozen;
  };
  // Collective steps, public for the autograd nodes in fsdp.cc.
  Full Gather(int64_t unit);
  void Prefetch(int64_t unit);  // Starts Gather(unit) now; no-op out of range.
  void ReduceScatter(int64_t unit, const at::Tensor& grad_full);
  Transformer::Layer LayerViews(int64_t unit, const Full& full) const;
  RootWeights RootViews(const Full& full) const;

 private:
  struct Entry {
    std::vector<int64_t> shape;
    int64_t offset = 0, numel = 0;
    bool present = false;  // Undefined fields (absent biases, a tied lm_head) take no space.
    bool frozen = false;   // In the frozen buffer (offset counts there).
  };
  struct Unit {
    std::vector<Entry> entries;  // Root: embed, final_norm, lm_head, score_w, score_b; block: Layer::Fields().
    int64_t numel = 0, padded = 0;                // Trainable part.
    int64_t frozen_numel = 0, frozen_padded = 0;  // Frozen part.
  };
  struct Pending {
    c10::intrusive_ptr<c10d::Work> work, frozen_work;  // Null where that part is empty.
    at::Tensor in, out, frozen_out;
    int64_t unit = -1;
  };

  ShardedWeights(c10::intrusive_ptr<c10d::Backend> backend, at::Device device, at::ScalarType dtype, Head head,
                 ModelConfig config, ModelOptions options);
  Pending StartGather(int64_t unit);
  void FinishReduceScatter(Pending& p);

  c10::intrusive_ptr<c10d::Backend> backend_;
  c10::intrusive_ptr<c10d::Backend> replicate_;  // Null: no replicas.
  at::Device device_;
  at::ScalarType dtype_;
  Head head_;
  ModelConfig config_;
  ModelOptions options_;  // The model's, for Consolidate().
  bool tied_ = false;
  int rank_ = 0, world_ = 1;
  std::vector<Unit> units_;  // 0: root; 1 + l: block l.
  std::vector<at::Tensor> shards_;
  std::vector<at::Tensor> frozen_shards_;
  int64_t lora_rank_ = 0;
  double lora_alpha_ = 0;
  Ranges decay_ranges_, head_ranges_;
  std::vector<Pending> gathers_;        // By unit; work null when none.
  std::deque<Pending> reduce_scatters_;  // In flight, oldest first.
};

// AdamW on a ShardedWeights' master shards: the same update as rl::AdamW
// (decay on matrices only, clipping by the global gradient norm), each rank
// on its own elements.
class ShardedAdamW : public rl::AdamW {
 public:
  ShardedAdamW(ShardedWeights* weights, rl::AdamWParams p);
  double Step() override;
  void SyncMasterFromParams() override {}  // The shards are their own masters.
  bool sharded() const override { return true; }

 private:
  ShardedWeights* weights_;
};

// TrainerOptions::make_optimizer: ShardedAdamW for a sharded model, AdamW
// for a resident one.
std::unique_ptr<rl::AdamW> MakeOptimizer(Transformer& model, const rl::AdamWParams& p);
// TrainerOptions::set_value_head: into the shards of a sharded critic, into
// the parameters of a resident one.
absl::Status SetValueHead(Transformer& critic, const at::Tensor& weight, const at::Tensor& bias);
// Both hooks: what a trainer of sharded models needs.
void UseShardedModels(rl::TrainerOptions* options);

}  // namespace kernelrl::learner::dist

#endif  // KERNELRL_LEARNER_DIST_FSDP_H_
