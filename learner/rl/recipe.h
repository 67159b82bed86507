// The CUDA-Agent recipe as one job (a JobRunner, learner/rl/jobs.h):
//
//   single_turn_ppo -> agent_warmup -> rft -> value_pretrain -> agentic_ppo
//
//  * single_turn_ppo / agentic_ppo: actors lease the task set (max_turns in
//    the task metadata), the trainer takes batch.trajectories_per_step
//    trajectories from the ingest buffer and runs one PPO update on them.
//  * agent_warmup: actors collect `steps` trajectories; no update.
//  * rft: SFT on the warm-up trajectories ChooseForRft keeps (R > 0, no
//    loops, schema-valid tool calls; a broken tail after the work is cut,
//    rft_filter.h), `epochs` passes, actor lr rft.lr (or a
//    cosine from it to rft.lr x rft.min_lr_ratio, RftLearningRate).
//  * value_pretrain: the critic on fresh rollouts of the RFT policy (or the
//    warm-up set), until its explained variance on a fresh (or held-out)
//    batch reaches min_explained_variance or `steps` updates; the last
//    update's metrics say which ended it.
// Every update is committed as: TRAINED records -> checkpoint (weights,
// AdamW state, RNG, policy version, stage cursor) -> COMMITTED record ->
// weight sync to the policy servers (a WeightSink) -> job record. A restart resumes from the
// last checkpoint; the ledger voids anything trained after it. Stages with
// `skip: true` are passed over (ablations).
#ifndef KERNELRL_LEARNER_RL_RECIPE_H_
#define KERNELRL_LEARNER_RL_RECIPE_H_

#include <memory>

#include "learner/rl/jobs.h"
#include "proto/learner_config.pb.h"

namespace kernelrl::learner {
class WeightSink;
}

namespace kernelrl::learner::rl {

class DpLeader;

// sink: where each new version is published (learner/sync/weight_sink.h:
// the built-in engine or external servers; may be null). metrics: where each committed step is recorded (may be null).
// dp: data-parallel training over the ranks it drives (learner/rl/dp_job.h;
// null = one device). Only this process (rank 0) writes checkpoints, the
// ledger and policy versions. gpu_lease_path: LearnerConfig.gpu_lease_path,
// held shared around the learner's GPU work: each training step, checkpoint
// and publish (common/gpu_lease.h; "" = none).
std::unique_ptr<JobRunner> MakeRecipeRunner(WeightSink* sink, LearnerMetrics* metrics = nullptr,
                                            DpLeader* dp = nullptr, const std::string& gpu_lease_path = "");

// The actor's learning rate for RFT update `step` (0-based) of `total`: rft.lr,
// or with rft.min_lr_ratio > 0 a cosine from rft.lr at the first update to
// rft.lr x min_lr_ratio at the last, so the stage ends on small steps rather
// than on whichever noisy iterate a constant rate leaves.
double RftLearningRate(const v1::RftConfig& rft, int64_t step, int64_t total);

}  // namespace kernelrl::learner::rl

#endif  // KERNELRL_LEARNER_RL_RECIPE_H_
