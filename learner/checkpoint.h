// Training checkpoints: HF-format weights plus everything needed to resume.
//
//   <root>/step-00000123/
//       policy/            config.json + safetensors (loads in transformers/vLLM)
//       critic/            same, value head (optional)
//       state.safetensors  optimizer tensors ("optimizer/<name>") and RNG
//                          states ("rng/cpu", "rng/cuda:<i>")
//       shards/            a sharded job's: every rank's master and optimizer
//                          shards (learner/dist/sharded_checkpoint.h)
//       manifest.json      policy_version, step, time, every file with its size
//   <root>/LATEST          "step-00000123"
//
// Contract (atomicity): a checkpoint is written into a hidden temporary
// directory, every file fsynced, then renamed into place, and only then is
// LATEST replaced (write + fsync + rename). A crash at any point leaves
// LATEST naming the previous complete checkpoint; leftovers of the crashed
// save are ignored and removed by the next save. Loading verifies the
// manifest (files present, sizes equal) and fails with DataLoss otherwise.
#ifndef KERNELRL_LEARNER_CHECKPOINT_H_
#define KERNELRL_LEARNER_CHECKPOINT_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "common/json.h"
#include "learner/model.h"

namespace kernelrl::learner {

struct CheckpointToSave {
  int64_t policy_version = 0;
  int64_t step = 0;
  const Transformer* policy = nullptr;  // Required.
  const Transformer* critic = nullptr;  // Optional.
  std::map<std::string, at::Tensor> optimizer;  // Any named tensors (e.g. AdamW moments).
  bool save_rng = true;                         // CPU and CUDA generator states.
  int keep_last = 3;                            // Older step-* directories are removed.
  // A directory the ranks of a sharded job wrote (learner/dist/sharded_checkpoint.h),
  // moved into the checkpoint as shards/ and counted in its manifest.
  std::string shards_dir;
};

struct LoadedCheckpoint {
  std::string dir;          // <root>/step-...
  std::string policy_dir;   // dir + "/policy"
  std::string critic_dir;   // empty if none was saved
  int64_t policy_version = 0;
  int64_t step = 0;
  std::map<std::string, at::Tensor> optimizer;  // On CPU.
  Json manifest;
};

// Returns the directory written.
absl::StatusOr<std::string> SaveCheckpoint(const std::string& root, const CheckpointToSave& ckpt);
// What weight sync reads between full checkpoints: the policy alone, as
// <root>/exports/step-N (a Hugging Face directory written beside it and
// renamed into place; not a checkpoint, nothing resumes from it), LoRA
// adapters merged in. The two newest exports stay. Returns the directory.
absl::StatusOr<std::string> SavePolicyExport(const std::string& root, int64_t step, const Transformer& policy);
// Removes the exports of steps up to `step` (its full checkpoint holds the policy).
void DropPolicyExports(const std::string& root, int64_t step);

// The checkpoint LATEST names. restore_rng: set the generators from it.
absl::StatusOr<LoadedCheckpoint> LoadLatestCheckpoint(const std::string& root, bool restore_rng = true);
absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& dir, bool restore_rng = true);

}  // namespace kernelrl::learner

#endif  // KERNELRL_LEARNER_CHECKPOINT_H_
