// A job trained data-parallel: rank 0 runs the recipe (ingest, job API,
// checkpoints, ledger, policy versions: rank 0 alone writes them) and drives
// ranks 1..N-1 through control messages on the rendezvous store
// (dist::DataParallel::StoreSet/StoreGet, keys "cmd/<seq>"). Every rank holds
// the same Trainer; each update step each rank trains on its shard of the
// global batch (dist::ShardByTokens) and the gradients are all-reduced.
//
//   setup  {job_dir, device, policy_dir, critic_dir, checkpoint_dir, hyperparameters}
//          every rank builds the job's trainer from the same files, loads
//          the same optimizer state, then rank 0's weights are broadcast
//   step   {objective, n, actor_lr, shards: [[ids of rank 0], [rank 1], ...],
//           baselines: [[per id of rank 0], ...]}
//          a rank reads its trajectories from <job_dir>/trajectories/ and
//          takes rank 0's baselines (computed on the global batch)
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
#include "learner/rl/trainer.h"
#include "proto/learner_config.pb.h"

namespace kernelrl::learner::rl {

// The trainer of a job (rank 0 and followers build it the same way):
// policy and critic loaded from their directories on `device`, dtype and
// checkpointing from the config, optimizer state if any. A job whose memory
// plan does not fit the device is refused (ResourceExhausted, the plan in
// the message) before any weight is read.
absl::StatusOr<std::unique_ptr<Trainer>> MakeJobTrainer(const v1::LearnerJobConfig& config,
                                                        const std::string& policy_dir, const std::string& critic_dir,
                                                        const std::map<std::string, at::Tensor>& optimizer,
                                                        at::Device device);

enum class StepKind { kPpo, kSft, kValue };

// Rank 0's side; one per learner process (the command sequence spans jobs).
class DpLeader {
 public:
  explicit DpLeader(dist::DataParallel* dp) : dp_(dp) {}
  dist::DataParallel* dp() { return dp_; }
  int world_size() const { return dp_->world_size(); }

  // Followers build their trainers; then every rank (this one too, through
  // `trainer`) joins the weight broadcast.
  absl::Status Setup(const std::string& job_dir, at::Device device, const std::string& policy_dir,
                     const std::string& critic_dir, const std::string& checkpoint_dir,
                     const std::string& hyperparameters_text, Trainer* trainer);
  // Sends every rank its shard and returns rank 0's; n_global = batch.size().
  absl::StatusOr<std::vector<Sample>> Step(StepKind kind, const std::vector<Sample>& batch, double actor_lr);
  absl::Status End();
  absl::Status Exit();

 private:
  absl::Status Send(const std::string& json);
  dist::DataParallel* dp_;
  int64_t seq_ = 0;
};

// Ranks 1..N-1: follow rank 0's commands until "exit" (OK) or an error.
absl::Status RunDpFollower(dist::DataParallel* dp);

}  // namespace kernelrl::learner::rl

#endif  // KERNELRL_LEARNER_RL_DP_JOB_H_
