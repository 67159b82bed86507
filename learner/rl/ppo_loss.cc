#include "learner/rl/ppo_loss.h"

#include <ATen/core/grad_mode.h>

namespace kernelrl::learner::rl {

PolicyLoss PpoPolicyLoss(const PolicyLossInput& in, const PolicyLossParams& p) {
  const bool tis = p.tis_threshold > 0;
  at::Tensor logp_d = in.logp.detach();
  at::Tensor old = tis ? logp_d : in.rollout_logp;
  at::Tensor ratio = at::exp(in.logp - old);
  at::Tensor clipped_ratio = at::clamp(ratio, 1.0 - p.clip_low, 1.0 + p.clip_high);
  at::Tensor surrogate = at::minimum(ratio * in.advantages, clipped_ratio * in.advantages);
  at::Tensor is_weight = at::exp(logp_d - in.rollout_logp);  // Mismatch, before truncation.
  at::Tensor coef = tis ? at::clamp_max(is_weight, p.tis_threshold) : at::ones_like(is_weight);
  PolicyLoss out;
  out.loss = -(in.weight * coef * surrogate).sum();

  at::NoGradGuard no_grad;
  at::Tensor r = ratio.detach(), a = in.advantages, w = in.weight;
  at::Tensor clipped = ((a > 0) & (r > 1.0 + p.clip_high)) | ((a < 0) & (r < 1.0 - p.clip_low));
  at::Tensor log_w = logp_d - in.rollout_logp;  // log(trainer / rollout)
  out.stats.clipped = (w * clipped.to(at::kFloat)).sum().item<double>();
  out.stats.is_weight = (w * is_weight).sum().item<double>();
  out.stats.truncated = tis ? (w * (is_weight > p.tis_threshold).to(at::kFloat)).sum().item<double>() : 0.0;
  out.stats.abs_logp_diff = (w * log_w.abs()).sum().item<double>();
  // k3 = (r - 1) - log r with r = rollout / trainer: unbiased, >= 0.
  at::Tensor inv = at::exp(-log_w);
  out.stats.kl = (w * (inv - 1.0 + log_w)).sum().item<double>();
  if (is_weight.numel() > 0) {
    out.stats.is_weight_max = is_weight.max().item<double>();
    out.stats.is_weight_min = is_weight.min().item<double>();
  }
  return out;
}

at::Tensor ValueLoss(const at::Tensor& values, const at::Tensor& returns, const at::Tensor& weight) {
  return 0.5 * (weight * (values - returns).square()).sum();
}

at::Tensor SftLoss(const at::Tensor& logp, const at::Tensor& weight) { return -(weight * logp).sum(); }

}  // namespace kernelrl::learner::rl
