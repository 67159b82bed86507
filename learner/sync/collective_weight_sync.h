// Weight sync without disk: a new policy version goes from the learner's
// sharded weights (learner/dist/fsdp.h) to engine replicas over a c10d
// process group (ProcessGroupNCCL between GPUs; any c10d backend on CPU).
//
// Two groups take part. The training group (the learner's shard group) is
// the one the ShardedWeights already use: every learner rank all-gathers each
// unit (root, then block 0, 1, ...) from its shards, as a forward pass does,
// the next unit's gather prefetched while the current one is sent. The sync
// group has the learner's shard rank 0 as its rank 0 and the replicas as
// ranks 1..R; rank 0 broadcasts each gathered unit to them. Learner ranks
// other than 0 take part only in the gathers.
//
// Wire order of one version (every member of the sync group follows it):
//   header  int64[3]: policy version, layout bytes L, at::ScalarType of the units
//   layout  uint8[L]:  ShardedWeights::Layout() as JSON (shapes of every field)
//   unit u  [numel_u] in the learner's compute dtype (bf16 on GPUs), u = 0..U-1,
//           each followed by its frozen part [frozen_numel_u] where the layout
//           has one (a model with LoRA adapters: the replica folds them in)
// A replica assembles a resident model on the received buffers (no copy
// when its device and dtype match) and swaps it into its engine under the
// version: the engine stamps every reply with it (learner/policy/engine.h).
//
// Not thread-safe; the collectives' order is the contract: one Send on the
// learner side matches one Receive on each replica.
#ifndef KERNELRL_LEARNER_SYNC_COLLECTIVE_WEIGHT_SYNC_H_
#define KERNELRL_LEARNER_SYNC_COLLECTIVE_WEIGHT_SYNC_H_

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "learner/dist/fsdp.h"
#include "learner/model.h"

namespace kernelrl::learner {

class PolicyEngine;

// Learner side: every rank of `weights`' shard group calls it at once;
// `sync` is the sync group on shard rank 0 and null on the other ranks.
// Each unit goes out on `wire` (the sync group's device; default the
// shards' own).
absl::Status SendWeights(dist::ShardedWeights& weights, c10d::Backend* sync, int64_t policy_version,
                         std::optional<at::Device> wire = std::nullopt);

// Learner side, from one process's whole policy (a learner that does not
// shard, or a sharded one's consolidated copy): lays a merged copy out as
// units on the CPU (ShardedWeights over a group of one, dist::SelfBackend)
// and sends it as SendWeights does, unit by unit in `dtype` on `wire`.
// Holds one more copy of the policy on the CPU (fp32) while it runs.
absl::Status SendModel(const Transformer& policy, c10d::Backend& sync, int64_t policy_version, at::Device wire,
                       at::ScalarType dtype);

struct ReceivedWeights {
  std::unique_ptr<Transformer> model;
  int64_t policy_version = 0;
};

// Replica side (rank >= 1 of `sync`): one version, onto options.device in
// options.dtype (received in the sender's dtype, converted if they differ).
absl::StatusOr<ReceivedWeights> ReceiveWeights(c10d::Backend& sync, const ModelOptions& options);

// ReceiveWeights, then PolicyEngine::SwapWeights: the engine serves the new
// version from its next batch on. Returns the version.
absl::StatusOr<int64_t> ReceiveIntoEngine(c10d::Backend& sync, const ModelOptions& options, PolicyEngine* engine);

}  // namespace kernelrl::learner

#endif  // KERNELRL_LEARNER_SYNC_COLLECTIVE_WEIGHT_SYNC_H_
