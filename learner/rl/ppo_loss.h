// The losses of the RL recipe on flat tensors of model tokens, with the
// per-trajectory weighting that makes them compose over packed rows and
// data-parallel ranks: token t of trajectory i carries weight
// w_t = 1 / (T_i * N), T_i = model tokens of trajectory i, N = trajectories
// in the global batch. sum_t w_t * loss_t is then "mean over tokens within a
// trajectory, mean over trajectories" (the paper's 1/T sum_t), however the
// tokens are split into rows and ranks.
#ifndef KERNELRL_LEARNER_RL_PPO_LOSS_H_
#define KERNELRL_LEARNER_RL_PPO_LOSS_H_

#include <ATen/ATen.h>

namespace kernelrl::learner::rl {

struct PolicyLossParams {
  double clip_low = 0.2;
  double clip_high = 0.28;
  // > 0: truncated importance sampling (see LearnerJobConfig.ppo.tis_threshold).
  double tis_threshold = 2.0;
};

// All [N] fp32, one entry per model token.
struct PolicyLossInput {
  at::Tensor logp;          // Trainer log-probs (differentiable).
  at::Tensor rollout_logp;  // What the inference engine reported.
  at::Tensor advantages;
  at::Tensor weight;        // 1 / (T_i * N).
};

// Sums over tokens (weighted the same way as the loss) for the step's metrics.
struct PolicyLossStats {
  double clipped = 0;        // Tokens whose clipped term is the active one.
  double is_weight = 0;      // exp(logp_trainer - logp_rollout) before truncation.
  double truncated = 0;      // Tokens whose IS weight hit the threshold.
  double abs_logp_diff = 0;  // |logp_trainer - logp_rollout|.
  double kl = 0;             // k3 estimate of KL(rollout || trainer).
  double is_weight_max = 0;  // Unweighted max / min over the tokens.
  double is_weight_min = 0;
};

struct PolicyLoss {
  at::Tensor loss;  // Scalar, differentiable.
  PolicyLossStats stats;
};

// Clipped surrogate with the asymmetric clip:
//   ratio_t = exp(logp_t - old_t)
//   loss_t  = -c_t * min(ratio_t * A_t, clip(ratio_t, 1 - clip_low, 1 + clip_high) * A_t)
// tis_threshold > 0: old_t = logp_t detached (one update per batch, so the
// pre-update policy is the trainer's own), c_t = min(exp(old_t - rollout_t),
// tis_threshold) detached. tis_threshold == 0: old_t = rollout_t, c_t = 1.
PolicyLoss PpoPolicyLoss(const PolicyLossInput& in, const PolicyLossParams& p);

// 1/2 * sum_t w_t (values_t - returns_t)^2.
at::Tensor ValueLoss(const at::Tensor& values, const at::Tensor& returns, const at::Tensor& weight);

// RFT: -sum_t w_t logp_t (SFT negative log-likelihood on model tokens).
at::Tensor SftLoss(const at::Tensor& logp, const at::Tensor& weight);

}  // namespace kernelrl::learner::rl

#endif  // KERNELRL_LEARNER_RL_PPO_LOSS_H_
