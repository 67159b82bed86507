// Per-GPU memory of a training job, from the model configs and the options,
// before anything is allocated: `kernelrl plan` prints it, and the learner
// refuses a job whose plan does not fit.
//
// The plan is arithmetic over the tensors one PPO step keeps (torch-free):
//   states       fp32 master weights and AdamW moments, gradients, and the
//                compute-dtype weights (sharded: each rank's 1/W, plus the
//                units it gathers: the root for a whole pass, one block and
//                the prefetched next, or every block without checkpointing)
//   activations  what autograd saves for one packed row of `tokens` tokens
//                through the actor and the critic (a block's input per
//                block with activation checkpointing, everything a block
//                saves without), the kept [tokens, vocab] logits, and the
//                largest transient (a block recomputed in backward, the
//                entropy metric's chunk)
// The peak is at the end of the forward pass (every activation, no gradient
// yet) or inside backward (every gradient, the checkpointed block inputs, a
// block recomputed); gradients replace activations as backward runs.
// It counts the tensors the learner makes, not the allocator's caching or
// CUDA/NCCL's own buffers: CUDA context, cuBLAS workspace and NCCL take a
// further ~1-3 GiB per GPU (PlanOptions::reserved_bytes).
#ifndef KERNELRL_LEARNER_DIST_MEMORY_PLAN_H_
#define KERNELRL_LEARNER_DIST_MEMORY_PLAN_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "learner/model_config.h"

namespace kernelrl::learner::dist {

struct PlanOptions {
  int world_size = 1;
  int64_t tokens = 32768;  // Of the longest packed row (TrainerOptions::max_tokens_per_row).
  bool sharded = true;
  bool activation_checkpointing = true;
  bool cuda = true;  // bf16 with the fused kernels; false: fp32 on the CPU (eager ops).
  bool offload_moments = false;  // Sharded on CUDA: AdamWParams::offload_moments (host moments).
  int64_t keep_logits_bytes = int64_t{4} << 30;  // ModelOptions::keep_logits_bytes.
  int64_t reserved_bytes = int64_t{3} << 30;     // CUDA context, workspaces, NCCL.
  int64_t device_bytes = int64_t{80} << 30;      // What one GPU has.
  int64_t host_limit_bytes = 0;                  // Pinned host memory a rank may take; 0: not checked.
  // LoRA adapters' rank per model (ModelOptions::lora_rank; 0: full
  // training): the base weights then take no master, moment or gradient,
  // and sharded they are kept in the compute dtype.
  int64_t actor_lora_rank = 0, critic_lora_rank = 0;
  // Checkpointed block inputs in host memory (ModelOptions::offload_activations,
  // CUDA): two of them on the GPU at a time instead of one per layer.
  bool offload_activations = false;
};

struct MemoryPlan {
  // Bytes per GPU by what they hold, then the peak phase's share: the
  // gradients and activations alive at the peak and its largest buffer.
  std::vector<std::pair<std::string, int64_t>> items;
  int64_t total = 0;  // Weights, masters and moments + the peak phase (+ reserved on CUDA).
  int64_t device_bytes = 0;
  // Pinned host memory per rank: host AdamW moments and offloaded layer inputs.
  int64_t host_bytes = 0;
  int64_t host_limit_bytes = 0;  // PlanOptions::host_limit_bytes.
  // A table: one line per item, the total, and whether it fits.
  std::string Table() const;
};

// critic may be null (actor-only stages).
MemoryPlan PlanMemory(const ModelConfig& actor, const ModelConfig* critic, const PlanOptions& o);

// ResourceExhausted naming the total, the device and the largest items when
// the plan does not fit the device, or its pinned host memory the host limit.
absl::Status CheckFits(const MemoryPlan& plan);

}  // namespace kernelrl::learner::dist

#endif  // KERNELRL_LEARNER_DIST_MEMORY_PLAN_H_
