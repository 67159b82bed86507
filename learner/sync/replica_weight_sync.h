// Policy replicas in other processes (learner/policy_replica_main.cc), each
// serving its own engine, take every committed version over a c10d sync
// group (collective_weight_sync.h: ProcessGroupNCCL between GPUs, on any
// host): the learner is its rank 0, replica r its rank r (1..R).
//
// A version goes out in three steps, keyed on the group's rendezvous store
// (its control prefix, dist::DataParallel::StoreSet/StoreGet):
//   announce  "weights/<seq>" = the version (decimal), or "stop" at the end;
//             seq counts publications from 0. A replica waits on the store
//             for the next seq, never inside a collective: an idle replica
//             would otherwise run into the backend's timeout
//   send      SendModel's broadcasts (the layout, then unit by unit)
//   ack       "weights/<seq>/<r>" = the version, once replica r's engine
//             has it queued: every request that reaches the replica from
//             then on is served by it and stamped with it (engine.h)
//   end       "weights/<seq>" = "stop"; each replica acknowledges with
//             "weights/<seq>/<r>" = "stop", then both sides destroy their
//             communicators together (NCCL's destroy waits for the peers);
//             a side left without its peer aborts them instead
// The sink returns once every replica has acknowledged (WeightSink's
// contract), or fails after `ack_timeout`. A replica that misses a
// version cannot rejoin: the group is fixed at its start (c10d's rule).
#ifndef KERNELRL_LEARNER_SYNC_REPLICA_WEIGHT_SYNC_H_
#define KERNELRL_LEARNER_SYNC_REPLICA_WEIGHT_SYNC_H_

#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "learner/dist/data_parallel.h"
#include "learner/dist/fsdp.h"
#include "learner/model.h"
#include "learner/sync/weight_sink.h"

namespace kernelrl::learner {

class CollectiveWeightSink final : public WeightSink {
 public:
  struct Options {
    at::Device wire_device = at::kCPU;     // The sync group's device (cuda:N under NCCL).
    at::ScalarType wire_dtype = at::kFloat;  // bf16 to GPU replicas.
    absl::Duration ack_timeout = absl::Minutes(10);
  };
  // `sync`: the sync group, this process as its rank 0.
  CollectiveWeightSink(std::unique_ptr<dist::DataParallel> sync, Options options);
  // Announces "stop": every replica's receiver returns; waits up to
  // `ack_timeout` (30 s at most) for their acknowledgements, then shuts the
  // group down (aborts it where one is missing).
  ~CollectiveWeightSink() override;

  // Loads `hf_dir` on the CPU, then as PublishModel.
  absl::Status Publish(const std::string& hf_dir, int64_t version) override;
  bool takes_models() const override { return true; }
  absl::Status PublishModel(const Transformer& policy, int64_t version) override;
  // A sharded policy straight from its shards (every other rank of the
  // shard group calls SendWeights(weights, nullptr, version) meanwhile).
  bool takes_shards() const override { return true; }
  absl::Status PublishShards(dist::ShardedWeights& weights, int64_t version) override;

  int replicas() const { return sync_->world_size() - 1; }

 private:
  // Announce, `send`, then every replica's acknowledgement.
  absl::Status Publication(int64_t version, const std::function<absl::Status()>& send);

  std::unique_ptr<dist::DataParallel> sync_;
  const Options options_;
  int64_t seq_ = 0;
  bool broken_ = false;  // A send failed midway: the group's collectives are out of step.
};

// Replica side: one receiver per replica process, on its own thread.
class ReplicaWeightReceiver {
 public:
  // Hands a received model and its version to the engine (PolicyEngine::SwapWeights).
  using Swap = std::function<void(std::unique_ptr<Transformer> model, int64_t version)>;
  // `sync`: the sync group, this replica as a rank >= 1; `options`: the
  // engine's device and dtype (received units are converted to them).
  ReplicaWeightReceiver(dist::DataParallel* sync, ModelOptions options, Swap swap);

  // The next version: waits up to `wait` for its announcement (DeadlineExceeded
  // when none came: call again), receives it, swaps it in, acknowledges.
  // Cancelled at "stop".
  absl::StatusOr<int64_t> Next(absl::Duration wait);
  // Next() until "stop", `stop` set (checked every `poll`), or an error;
  // then ends the group: shut down with the learner at "stop", else aborted.
  absl::Status Run(const std::atomic<bool>& stop, absl::Duration poll = absl::Seconds(1));

 private:
  dist::DataParallel* sync_;
  const ModelOptions options_;
  const Swap swap_;
  int64_t seq_ = 0;
};

}  // namespace kernelrl::learner

#endif  // KERNELRL_LEARNER_SYNC_REPLICA_WEIGHT_SYNC_H_
