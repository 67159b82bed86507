// The learner's update steps on an actor (policy) and a critic, both
// learner::Transformer: PPO (the agentic and single-turn stages), SFT on
// model tokens (RFT) and value pretraining. Each step is one function that
// reads top to bottom in trainer.cc: samples -> packed rows -> critic values
// -> GAE -> policy log-probs -> losses -> backward (per row, gradients
// accumulate) -> gradient all-reduce (data-parallel) -> clip -> AdamW.
//
// Data-parallel (set_collectives): each rank passes its shard of the global
// batch and the global trajectory count N. Loss weights are 1/(T_i N), so the
// summed gradients and summed losses of the shards are those of one rank on
// the whole batch; the step's metrics are reduced the same way (sums, maxima)
// and every rank returns the global batch's metrics. A rank may have an empty
// shard (fewer trajectories than ranks): it contributes zeros.
//
// Contract:
//  * SftStep, ValueStep: one optimizer step per call; PpoStep: epochs x
//    minibatches steps. A change of objective (stage) resets both optimizers.
//  * Weights on the device in the model dtype; AdamW keeps fp32 master
//    weights and moments (a bf16 weight cannot absorb a 3e-6 update), and
//    copies the result back into the model after each step.
//  * Only model tokens (loss_mask 1) enter any loss.
//  * Not thread-safe: one thread drives a Trainer.
#ifndef KERNELRL_LEARNER_RL_TRAINER_H_
#define KERNELRL_LEARNER_RL_TRAINER_H_

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "learner/model.h"
#include "learner/rl/collectives.h"
#include "learner/rl/ppo_loss.h"
#include "learner/rl/sample.h"

namespace kernelrl::learner::rl {

struct AdamWParams {
  double lr = 3e-6, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  double max_grad_norm = 1.0;  // 0 = no clipping.
  // Schedule over this optimizer's steps since its last Reset(): linear
  // warm-up, then cosine decay to min_lr_ratio x lr over decay_steps (0 = constant).
  int64_t warmup_steps = 0, decay_steps = 0;
  double min_lr_ratio = 0.1;
  double head_lr_scale = 1.0;  // Learning rate x this on the parameters marked `head`.
  // Sharded optimizers only: the moments live in (pinned) host memory and
  // visit the device one unit at a time during Step() (ZeRO-Offload's
  // placement with the update kept on the GPU): 8 bytes per parameter shard
  // leave the GPU for two host copies of them per step.
  bool offload_moments = false;
};

// AdamW (at::_fused_adamw_) over a model's parameters with fp32 master
// weights and moments. decay[i]: whether parameter i takes weight decay;
// head[i]: whether it learns at head_lr_scale x lr (empty = no / no).
class AdamW {
 public:
  AdamW(std::vector<at::Tensor> params, AdamWParams p, std::vector<bool> decay = {}, std::vector<bool> head = {});
  virtual ~AdamW() = default;
  // Clips the gradients to max_grad_norm, steps at lr() x ScheduleFactor(),
  // zeroes the gradients. Returns the gradient norm before clipping.
  virtual double Step();
  virtual void ZeroGrad();
  // Moments and step counts to zero (a new stage starts its own schedule).
  virtual void Reset();
  // The fp32 master copies take the model's current weights.
  virtual void SyncMasterFromParams();
  void set_lr(double lr) { p_.lr = lr; }
  // The base learning rate; the next step uses lr() x ScheduleFactor().
  double lr() const { return p_.lr; }
  double ScheduleFactor() const;
  int64_t steps() const { return step_count_; }
  std::vector<at::Tensor>& params() { return params_; }
  // "<prefix><i>/{exp_avg,exp_avg_sq,step,master}" for checkpoints.
  virtual std::map<std::string, at::Tensor> State(const std::string& prefix) const;
  virtual absl::Status LoadState(const std::map<std::string, at::Tensor>& state, const std::string& prefix);
  // Whether the gradients reach Step() already reduced over data-parallel
  // ranks (a sharded optimizer's are reduce-scattered during backward); the
  // trainer then neither all-reduces them nor broadcasts the parameters.
  virtual bool sharded() const { return false; }

 protected:
  explicit AdamW(AdamWParams p) : p_(p) {}  // For sharded optimizers (learner/dist/fsdp.h).

  AdamWParams p_;
  std::vector<at::Tensor> params_, master_, exp_avg_, exp_avg_sq_, steps_;
  std::vector<bool> decay_, head_;
  bool separate_master_ = false;
  int64_t step_count_ = 0;
};

// Where the actor's advantages come from (PpoConfig.task_baseline): one or
// the other, never both.
enum class AdvantageEstimator {
  kCritic,        // GAE on the raw reward with the critic's values; Sample.baseline must be 0.
  kTaskBaseline,  // reward - Sample.baseline on every model token; the critic's values unused.
};
enum class LossAggregation { kTrajectoryMean, kTokenMean };  // ppo_loss.h.

struct TrainerOptions {
  PolicyLossParams policy_loss;
  AdvantageEstimator advantage = AdvantageEstimator::kCritic;
  // The actor's GAE: the fixed lambda, or with lambda_length_alpha > 0 the
  // length-adaptive 1 - 1 / (alpha T) per trajectory. The critic's targets
  // use lambda_critic (1 = Monte-Carlo returns).
  double gamma = 1.0, lambda = 0.95, lambda_length_alpha = 0, lambda_critic = 1.0;
  LossAggregation aggregation = LossAggregation::kTrajectoryMean;
  int epochs = 1, minibatches = 1;  // PPO: epochs x minibatches optimizer steps per PpoStep.
  // The critic's passes per PpoStep (>= epochs): the ones after `epochs` train it alone.
  int critic_epochs = 1;
  // A critic that has never trained starts its value head at small random
  // weights (std value_head_init_std) and a bias at the mean reward of the
  // first batch it trains on (the warm-up return), not at 0.
  bool value_head_init = true;
  double value_head_init_std = 1e-3;
  double temperature = 1.0;
  bool entropy_metric = true;
  bool normalize_advantages = false;  // PpoConfig.normalize_advantages.
  double entropy_coef = 0;            // PpoConfig.entropy_coef.
  double kl_ref_coef = 0;             // PpoConfig.kl_ref_coef: KL to the PPO stage's starting actor.
  int64_t max_tokens_per_row = 32768;
  AdamWParams actor, critic;
  // Makes each model's optimizer; null = AdamW over model.parameters().
  // Sharded models take a sharded one (learner/dist/fsdp.h).
  std::function<std::unique_ptr<AdamW>(Transformer& model, const AdamWParams& p)> make_optimizer;
  // Writes the critic's initial value head (weight [1, hidden], bias [1]);
  // null = SetResidentValueHead. A sharded critic's parameters are flat shards.
  std::function<absl::Status(Transformer& critic, const at::Tensor& weight, const at::Tensor& bias)> set_value_head;
};

// Sees the gradients of one model ("actor" or "critic") after the
// data-parallel reduction, before clipping (tests and the DP benchmark).
using GradObserver = std::function<void(const std::string& model, const std::vector<at::Tensor>& grads)>;

// Metrics of one step, by name (docs/LEARNER.md lists them).
using StepMetrics = std::map<std::string, double>;

// The value head of a critic whose parameters are its own tensors.
absl::Status SetResidentValueHead(Transformer& critic, const at::Tensor& weight, const at::Tensor& bias);

class Trainer {
 public:
  // critic may be null for stages that train only the actor (RFT) and for
  // PPO with the per-task baseline.
  Trainer(std::unique_ptr<Transformer> policy, std::unique_ptr<Transformer> critic, TrainerOptions options);

  // One PPO update of actor and critic on `batch`: epochs x minibatches
  // optimizer steps. global_trajectories: the N of the loss weights (all
  // ranks' trajectories); 0 = batch.size(). The metrics describe the batch
  // (explained variance on the values before the update; the trust-region
  // fractions averaged over the optimizer steps).
  absl::StatusOr<StepMetrics> PpoStep(const std::vector<Sample>& batch, int64_t global_trajectories = 0);
  // RFT: one actor update minimizing the NLL of the model tokens.
  absl::StatusOr<StepMetrics> SftStep(const std::vector<Sample>& batch, int64_t global_trajectories = 0);
  // Value pretraining: one critic update towards the critic's targets.
  absl::StatusOr<StepMetrics> ValueStep(const std::vector<Sample>& batch, int64_t global_trajectories = 0);
  // The same update inside the PPO stage (PpoConfig.critic_replay_batches): the critic on earlier
  // batches too, its optimizers' moments and the stage left as they are (no reset).
  absl::StatusOr<StepMetrics> CriticReplayStep(const std::vector<Sample>& batch, int64_t global_trajectories = 0);
  // The critic's values per model token of each sample, without gradient (one rank).
  absl::StatusOr<std::vector<std::vector<float>>> CriticValues(const std::vector<Sample>& batch);

  // Data-parallel: not owned, outlives the trainer; null = one rank.
  void set_collectives(Collectives* c) { collectives_ = c; }
  void set_grad_observer(GradObserver f) { grad_observer_ = std::move(f); }
  // Makes every rank's weights rank 0's (after loading, before the first step).
  absl::Status BroadcastParameters();
  Transformer& policy() { return *policy_; }
  Transformer* critic() { return critic_.get(); }
  AdamW& actor_optimizer() { return *actor_opt_; }
  AdamW* critic_optimizer() { return critic_opt_.get(); }
  const TrainerOptions& options() const { return options_; }
  // What a checkpoint must carry besides the optimizers ("trainer/..."): the
  // last objective (a change of objective is a stage change: both optimizers
  // reset), whether the value head was initialised, and with kl_ref_coef the
  // reference policy's weights ("trainer/kl_ref/<i>"). A state without the
  // head key (an older checkpoint) counts as an initialised head.
  std::map<std::string, at::Tensor> State() const;
  absl::Status LoadState(const std::map<std::string, at::Tensor>& state);
  // The KL penalty's reference policy (null until a PPO stage with kl_ref_coef starts).
  const Transformer* kl_reference() const { return ref_policy_.get(); }

 private:
  enum class Objective { kPpo = 0, kSft = 1, kValue = 2 };
  // One optimizer step on `batch`; raw (unreduced-to-figures) metrics.
  // `stage`: the objective whose optimizers these are (a critic-only pass of PPO is kValue in the
  // stage kPpo: no optimizer reset); default `objective`.
  absl::StatusOr<StepMetrics> Update(const std::vector<Sample>& batch, double n_global, Objective objective,
                                     std::optional<Objective> stage = std::nullopt);
  absl::StatusOr<StepMetrics> Step(const std::vector<Sample>& batch, int64_t global_trajectories, Objective objective,
                                   std::optional<Objective> stage = std::nullopt);
  // Mean and standard deviation of the batch's advantages over every rank's model tokens.
  absl::StatusOr<std::pair<double, double>> AdvantageMoments(const std::vector<Sample>& batch,
                                                             const std::vector<PackedRow>& rows, at::Device device);
  // Value head: small weights, bias at the global batch's mean reward.
  absl::Status InitValueHead(const std::vector<Sample>& batch, at::Device device);
  // Per model token of a row's segments: actor advantages and critic targets.
  void RowTargets(const std::vector<int>& samples, const std::vector<int64_t>& begin,
                  const std::vector<int64_t>& end, const std::vector<Sample>& batch, const float* v,
                  std::vector<float>* adv, std::vector<float>* ret) const;

  // Forward/backward passes this rank runs for `rows` packed rows: as many as
  // the rank with the most when a model taking part is sharded.
  absl::StatusOr<int64_t> Passes(size_t rows, bool actor, bool critic, at::Device device);
  // A one-token pass with zero loss through the models taking part.
  void EmptyPass(bool actor, bool critic, at::Device device);
  // The reference policy: a copy of the actor as it is now (no gradient, no adapters).
  absl::Status TakeKlReference();

  std::unique_ptr<Transformer> policy_, critic_;
  std::unique_ptr<Transformer> ref_policy_;  // PPO's KL reference (kl_ref_coef > 0).
  std::unique_ptr<AdamW> actor_opt_, critic_opt_;
  TrainerOptions options_;
  Collectives* collectives_ = nullptr;
  GradObserver grad_observer_;
  int last_objective_ = -1;  // None yet.
  bool critic_head_ready_ = false;
};

}  // namespace kernelrl::learner::rl

#endif  // KERNELRL_LEARNER_RL_TRAINER_H_
