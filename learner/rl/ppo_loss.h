// The losses of the RL recipe on flat tensors of model tokens, with the
// weighting that makes them compose over packed rows and data-parallel
// ranks: token t carries a weight w_t, and the loss is sum_t w_t * loss_t.
//  * Trajectory mean (the paper's 1/T sum_t): w_t = 1 / (T_i * N), T_i the
//    model tokens of trajectory i, N the trajectories of the global batch.
//  * Token mean (DAPO): w_t = 1 / (model tokens of the global batch).
// Either way the weights of a global batch sum to 1, however the tokens are
// split into rows and ranks, and a weighted sum of a 0/1 indicator is a
// fraction.
#ifndef KERNELRL_LEARNER_RL_PPO_LOSS_H_
#define KERNELRL_LEARNER_RL_PPO_LOSS_H_

#include <ATen/ATen.h>

namespace kernelrl::learner::rl {

enum class MismatchMask { kToken, kSequence, kOff };

struct PolicyLossParams {
  double clip_low = 0.2;
  double clip_high = 0.28;
  double dual_clip = 3.0;  // 0 = off; else > 1.
  // Tokens (or sequences) whose exp(logp_trainer - logp_rollout) leaves
  // [mismatch_low, mismatch_high] are masked (PpoConfig.mismatch_*).
  MismatchMask mismatch_mask = MismatchMask::kToken;
  double mismatch_low = 0.5, mismatch_high = 2.0;
};

// All [N], one entry per model token.
struct PolicyLossInput {
  at::Tensor logp;          // Trainer log-probs (differentiable), fp32.
  at::Tensor rollout_logp;  // What the inference engine reported, fp32.
  at::Tensor advantages;    // fp32.
  at::Tensor weight;        // fp32, as above.
  at::Tensor sequence;      // int64: the token's trajectory, 0..S-1 (for the sequence mask).
};

// Sums over tokens (weighted the same way as the loss) for the step's metrics.
struct PolicyLossStats {
  double clipped = 0;        // Tokens whose clipped term is the active one.
  double dual_clipped = 0;   // Tokens held at dual_clip * A (A < 0, ratio > dual_clip).
  double masked = 0;         // Tokens the mismatch mask removed.
  double is_weight = 0;      // exp(logp_trainer - logp_rollout).
  double abs_logp_diff = 0;  // |logp_trainer - logp_rollout|.
  double kl = 0;             // k3 estimate of KL(rollout || trainer).
  double is_weight_max = 0;  // Unweighted max / min over the tokens.
  double is_weight_min = 0;
};

struct PolicyLoss {
  at::Tensor loss;  // Scalar, differentiable.
  PolicyLossStats stats;
};

// Clipped surrogate against the rollout policy, asymmetric clip, dual-clip,
// mismatch mask:
//   r_t    = exp(logp_t - rollout_t)
//   s_t    = min(r_t A_t, clip(r_t, 1 - clip_low, 1 + clip_high) A_t)
//   s_t    = max(s_t, dual_clip A_t)                  where A_t < 0
//   keep_t = 0 if the mismatch ratio exp(logp_t - rollout_t) (detached; per
//            token, or the geometric mean over the token's trajectory) leaves
//            [mismatch_low, mismatch_high], else 1
//   loss   = -sum_t w_t keep_t s_t
// The loss is bounded: |s_t| <= max(1 + clip_high, dual_clip) |A_t| and a
// masked token contributes nothing.
PolicyLoss PpoPolicyLoss(const PolicyLossInput& in, const PolicyLossParams& p);

// 1/2 * sum_t w_t (values_t - returns_t)^2.
at::Tensor ValueLoss(const at::Tensor& values, const at::Tensor& returns, const at::Tensor& weight);

// RFT: -sum_t w_t logp_t (SFT negative log-likelihood on model tokens).
at::Tensor SftLoss(const at::Tensor& logp, const at::Tensor& weight);

// The pull towards a reference policy: Schulman's k3 estimate of KL(pi || ref) on the sampled
// tokens, each bounded, weighted and summed:
//   d_t = clamp(ref_t - logp_t, -kKlRefLogRatioBound, kKlRefLogRatioBound)
//   k_t = min(exp(d_t) - d_t - 1, kKlRefTokenBound)
//   sum_t w_t k_t                                   (>= 0; gradient through logp)
// A token past the bound (the policy ~2.5 nats below the reference, or ~11 above) adds the bound
// and no gradient: without it one such token's exp(d) sets the update's direction (on an H200
// seed ~10 tokens 9 nats apart gave an update of gradient norm 31). verl's low_var_kl bounds it
// the same way.
constexpr double kKlRefTokenBound = 10.0;
constexpr double kKlRefLogRatioBound = 20.0;
at::Tensor KlRefPenalty(const at::Tensor& ref_logp, const at::Tensor& logp, const at::Tensor& weight);

}  // namespace kernelrl::learner::rl

#endif  // KERNELRL_LEARNER_RL_PPO_LOSS_H_
