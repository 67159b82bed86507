// Checkpoints of fully sharded models (learner/dist/fsdp.h): every rank
// writes only what it holds, and resumes from only that.
//
//   <dir>/<name>.layout.json                       rank 0: ShardedWeights::Layout()
//   <dir>/<name>.rank-00001-of-00004.safetensors   rank 1: per unit u, "<u>/master"
//                                                  (fp32 shard) and the optimizer's
//                                                  "<u>/exp_avg", "<u>/exp_avg_sq", "<u>/step"
//
// Each file lands atomically (temporary file, fsync, rename); the directory
// as a whole is the caller's to publish once every rank has written (a
// barrier, then checkpoint.h's LATEST). Resuming needs the same world size
// (the layout says which). ConsolidateShards reads every rank's file without
// a process group: the fp32 model, to Save() as Hugging Face safetensors.
#ifndef KERNELRL_LEARNER_DIST_SHARDED_CHECKPOINT_H_
#define KERNELRL_LEARNER_DIST_SHARDED_CHECKPOINT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "learner/dist/fsdp.h"
#include "learner/model.h"
#include "learner/rl/trainer.h"

namespace kernelrl::learner::dist {

struct ShardedModelRef {
  std::string name;           // "actor", "critic": the files' prefix.
  ShardedWeights* weights;    // Not owned.
  rl::AdamW* optimizer;       // Its ShardedAdamW; not owned.
};

// This rank's shards and optimizer state into `dir` (which must exist);
// with hybrid sharding only the first replica of each shard writes.
absl::Status SaveShards(const std::string& dir, const std::vector<ShardedModelRef>& models);
// This rank's shards and optimizer state from `dir`; FailedPrecondition when
// it was written by another world size or another model shape.
absl::Status LoadShards(const std::string& dir, const std::vector<ShardedModelRef>& models);
// The whole model `name` of `dir`, fp32 on the CPU.
absl::StatusOr<std::unique_ptr<Transformer>> ConsolidateShards(const std::string& dir, const std::string& name);

}  // namespace kernelrl::learner::dist

#endif  // KERNELRL_LEARNER_DIST_SHARDED_CHECKPOINT_H_
