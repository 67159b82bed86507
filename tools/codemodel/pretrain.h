// Pre-training (SFT) of the from-scratch code model on its corpus, with the
// learner's own trainer: each corpus record is rendered by the actor's chat
// format (tools announced, as in a rollout) and trained with Trainer::SftStep
// (NLL of the assistant tokens only: the loss mask of a rollout). The result
// is an HF checkpoint (config.json, model.safetensors) with the corpus's
// tokenizer.json beside it: what `kernelrl learn --base_checkpoint` and
// `kernelrl eval --policy=checkpoint:DIR` load.
#ifndef KERNELRL_TOOLS_CODEMODEL_PRETRAIN_H_
#define KERNELRL_TOOLS_CODEMODEL_PRETRAIN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kernelrl::codemodel {

struct PretrainOptions {
  std::string corpus_dir;  // corpus.jsonl and tokenizer.json (corpus_gen's --out).
  std::string out_dir;     // The checkpoint.
  // Qwen2 shape.
  int64_t hidden = 256, layers = 4, heads = 4, kv_heads = 2, intermediate = 704;
  int64_t max_position_embeddings = 32768;  // A longer corpus record is refused.
  int steps = 200;
  int batch = 8;             // Trajectories per step.
  double lr = 1e-3;
  int warmup_steps = 20;     // Then cosine decay to 0.1 lr over the rest.
  std::string device = "cpu";  // "cpu" (fp32) or "cuda" (bf16).
  uint64_t seed = 1;
  int log_every = 10;
  // False: a reply the corpus marks "rejected" (its code failed the next verdict: a planted fault,
  // an fp16 design) is context with no loss, so the model learns the fix and not the fault.
  bool train_rejected = true;
};

struct PretrainResult {
  std::vector<double> losses;     // sft_loss per step.
  int64_t parameters = 0;
  int64_t samples = 0;
  double mean_model_tokens = 0;   // Per trajectory.
  std::string safetensors_sha256; // Of out_dir/model.safetensors.
  double seconds = 0;             // Of the training steps.
  double tokens_per_second = 0;   // Packed tokens (prompt and model) through the steps.
};

absl::StatusOr<PretrainResult> Pretrain(const PretrainOptions& options);

}  // namespace kernelrl::codemodel

#endif  // KERNELRL_TOOLS_CODEMODEL_PRETRAIN_H_
