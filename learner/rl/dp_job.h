// A job trained data-parallel: rank 0 runs the recipe (ingest, job API,
// checkpoints, ledger, policy versions: rank 0 alone writes them) and drives
// ranks 1..N-1 through control messages on the rendezvous store
// (dist::DataParallel::StoreSet/StoreGet, keys "cmd/<seq>"). Each update step
// each rank trains on its shard of the global batch (dist::ShardByTokens).
// With REPLICATE every rank holds the same whole models and the gradients
// are all-reduced; with FULL_SHARD / HYBRID_SHARD (learner/dist/fsdp.h) each
// holds its shard of both models and their optimizer state.
//
//   setup  {job_dir, device, policy_dir, critic_dir, checkpoint_dir,
//           hyperparameters, sharding, ranks_per_host}
//          every rank makes the job's groups (hybrid: its host's shard group
//          and its replicate group) and builds the job's trainer from the
//          same files (sharded: its shards, and from checkpoint_dir/shards
//          its optimizer shards); replicated, rank 0's weights are then
//          broadcast
//   step   {objective, n, actor_lr, shards: [[ids of rank 0], [rank 1], ...],
//           baselines: [[per id of rank 0], ...]}
//          a rank reads its trajectories from <job_dir>/trajectories/ and
//          takes rank 0's baselines (computed on the global batch)
//   save   {dir}  (sharded) every rank writes its shards into dir, then every
//          rank joins the consolidation of both models (rank 0 keeps them)
//   export {}     (sharded) every rank joins the consolidation of the policy
//          (rank 0 keeps it): the weight sync between full checkpoints
//   send_weights {version}  (sharded) the ranks of rank 0's shard group join
//          the gathers of rank 0's weight sync to replicas in other
//          processes (learner/sync/collective_weight_sync.h SendWeights)
//   values {ids}  (sharded) every rank runs the critic over the same
//          trajectories (rank 0 keeps the values)
//   end    the job's runner is done: ranks drop the trainer
//   exit   the learner is shutting down
//
// Contract: rank 0 sends "step" only for trajectories it converted into
// samples itself, so a follower's shard is valid; a follower that fails
// anyway exits, and rank 0's next collective fails at the NCCL timeout.
#ifndef KERNELRL_LEARNER_RL_DP_JOB_H_
#define KERNELRL_LEARNER_RL_DP_JOB_H_

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "learner/dist/data_parallel.h"
#include "learner/model.h"
#include "learner/rl/trainer.h"
#include "learner/sync/weight_sink.h"
#include "proto/learner_config.pb.h"

namespace kernelrl::learner::rl {

// How a job's models are spread over the learner group, and the groups it
// takes: every rank makes it in the same order (subgroups are collective).
struct JobSharding {
  v1::DistributedConfig::Sharding mode = v1::DistributedConfig::REPLICATE;
  std::unique_ptr<dist::DataParallel> shard_group;      // Sharded; null = the whole group.
  std::unique_ptr<dist::DataParallel> replicate_group;  // Hybrid: the ranks holding the same shard.
  dist::DataParallel* world = nullptr;
  bool sharded() const { return mode != v1::DistributedConfig::REPLICATE; }
};
// `job` names this job's subgroups (unique per learner process).
absl::StatusOr<std::unique_ptr<JobSharding>> MakeJobSharding(dist::DataParallel* world,
                                                             v1::DistributedConfig::Sharding mode, int ranks_per_host,
                                                             const std::string& job);

// The trainer of a job (rank 0 and followers build it the same way):
// policy and critic loaded from their directories on `device`, dtype and
// checkpointing from the config, optimizer state if any. Sharded (`sharding`
// given and sharded): each model cut over the shard group, the optimizer
// shards from `checkpoint_dir`/shards when resuming (`optimizer` then holds
// the trainer's own state only). A job whose memory plan does not fit the
// device is refused (ResourceExhausted, the plan in the message) before any
// weight is read; a checkpoint of the other kind (sharded / replicated) is
// refused (FailedPrecondition).
absl::StatusOr<std::unique_ptr<Trainer>> MakeJobTrainer(const v1::LearnerJobConfig& config,
                                                        const std::string& policy_dir, const std::string& critic_dir,
                                                        const std::map<std::string, at::Tensor>& optimizer,
                                                        at::Device device, const JobSharding* sharding = nullptr,
                                                        const std::string& checkpoint_dir = "");

// kCriticReplay: a value step inside the PPO stage (Trainer::CriticReplayStep).
enum class StepKind { kPpo, kSft, kValue, kCriticReplay };

// One update of `kind` on `batch` (this rank's share of `global_trajectories`; 0: the batch's size).
absl::StatusOr<StepMetrics> RunStep(Trainer& trainer, StepKind kind, const std::vector<Sample>& batch,
                                    int64_t global_trajectories = 0);

// What the group trains with: DistributedConfig.sharding and, for hybrid
// sharding, the shard group's size (ranks_per_host).
struct GroupSharding {
  v1::DistributedConfig::Sharding mode = v1::DistributedConfig::REPLICATE;
  int ranks_per_host = 1;
};

// Rank 0's side; one per learner process (the command sequence spans jobs).
class DpLeader {
 public:
  explicit DpLeader(dist::DataParallel* dp, GroupSharding sharding = {}) : dp_(dp), group_(sharding) {}
  dist::DataParallel* dp() { return dp_; }
  int world_size() const { return dp_->world_size(); }
  bool sharded() const { return group_.mode != v1::DistributedConfig::REPLICATE; }

  // Every rank makes the job's groups and builds its trainer (MakeJobTrainer
  // with `optimizer`, loaded from checkpoint_dir); replicated, rank 0's
  // weights are then broadcast. Returns rank 0's trainer.
  absl::StatusOr<std::unique_ptr<Trainer>> Setup(const std::string& job_dir, at::Device device,
                                                 const std::string& policy_dir, const std::string& critic_dir,
                                                 const std::string& checkpoint_dir,
                                                 const std::string& hyperparameters_text,
                                                 const std::map<std::string, at::Tensor>& optimizer);
  // Sends every rank its shard and returns rank 0's; n_global = batch.size().
  absl::StatusOr<std::vector<Sample>> Step(StepKind kind, const std::vector<Sample>& batch, double actor_lr);
  // Sharded: every rank writes its shards into `dir` (created here), then
  // the whole models come back, fp32 on the CPU, for the checkpoint (critic
  // null when the trainer has none).
  struct Consolidated {
    std::unique_ptr<Transformer> policy, critic;
  };
  absl::StatusOr<Consolidated> Save(const std::string& dir, Trainer* trainer);
  // Sharded: the whole policy, fp32 on the CPU, for weight sync (every rank
  // joins the gathers; no shards are written).
  absl::StatusOr<std::unique_ptr<Transformer>> ExportPolicy(Trainer* trainer);
  // Sharded: the policy to `sink` (takes_shards) straight from its shards:
  // the ranks of rank 0's shard group join its gathers, unit by unit, while
  // rank 0 publishes (no whole copy anywhere).
  absl::Status PublishShards(Trainer* trainer, WeightSink* sink, int64_t version);
  // The critic's values of `batch` (CriticValues); sharded, every rank runs
  // the same passes (the samples must be trajectories of the job's files).
  absl::StatusOr<std::vector<std::vector<float>>> CriticValues(const std::vector<Sample>& batch, Trainer* trainer);
  absl::Status End();
  absl::Status Exit();

 private:
  absl::Status Send(const std::string& json);
  dist::DataParallel* dp_;
  GroupSharding group_;
  std::unique_ptr<JobSharding> job_;
  int64_t seq_ = 0;
  int64_t jobs_ = 0;
};

// Ranks 1..N-1: follow rank 0's commands until "exit" (OK) or an error.
absl::Status RunDpFollower(dist::DataParallel* dp);

}  // namespace kernelrl::learner::rl

#endif  // KERNELRL_LEARNER_RL_DP_JOB_H_
