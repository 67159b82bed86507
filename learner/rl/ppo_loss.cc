#include "learner/rl/ppo_loss.h"

#include <ATen/core/grad_mode.h>

#include <cmath>

namespace kernelrl::learner::rl {
namespace {

// 1 where the token is trained, 0 where the rollout/trainer mismatch masks it.
at::Tensor KeepMask(const at::Tensor& log_w, const at::Tensor& sequence, const PolicyLossParams& p) {
  if (p.mismatch_mask == MismatchMask::kOff || log_w.numel() == 0) return at::ones_like(log_w);
  const double lo = p.mismatch_low > 0 ? std::log(p.mismatch_low) : -HUGE_VAL, hi = std::log(p.mismatch_high);
  at::Tensor x = log_w;
  if (p.mismatch_mask == MismatchMask::kSequence) {  // Geometric mean of each trajectory's ratios.
    const int64_t s = sequence.max().item<int64_t>() + 1;
    at::Tensor sum = at::zeros({s}, log_w.options()).index_add_(0, sequence, log_w);
    at::Tensor n = at::zeros({s}, log_w.options()).index_add_(0, sequence, at::ones_like(log_w));
    x = (sum / n).index_select(0, sequence);
  }
  return ((x >= lo) & (x <= hi)).to(at::kFloat);
}

}  // namespace

PolicyLoss PpoPolicyLoss(const PolicyLossInput& in, const PolicyLossParams& p) {
  at::Tensor logp_d = in.logp.detach();
  at::Tensor log_w = logp_d - in.rollout_logp;  // log(trainer / rollout), detached.
  at::Tensor keep = KeepMask(log_w, in.sequence, p);
  at::Tensor ratio = at::exp(in.logp - in.rollout_logp);
  at::Tensor a = in.advantages;
  at::Tensor surrogate = at::minimum(ratio * a, at::clamp(ratio, 1.0 - p.clip_low, 1.0 + p.clip_high) * a);
  if (p.dual_clip > 0) surrogate = at::where(a < 0, at::maximum(surrogate, p.dual_clip * a), surrogate);
  PolicyLoss out;
  out.loss = -(in.weight * keep * surrogate).sum();

  at::NoGradGuard no_grad;
  at::Tensor r = ratio.detach(), w = in.weight;
  at::Tensor clipped = ((a > 0) & (r > 1.0 + p.clip_high)) | ((a < 0) & (r < 1.0 - p.clip_low));
  auto frac = [&](const at::Tensor& indicator) { return (w * indicator.to(at::kFloat)).sum().item<double>(); };
  out.stats.clipped = frac(clipped & (keep > 0));
  out.stats.dual_clipped = p.dual_clip > 0 ? frac((a < 0) & (r > p.dual_clip) & (keep > 0)) : 0.0;
  out.stats.masked = frac(keep == 0);
  out.stats.is_weight = (w * r).sum().item<double>();
  out.stats.abs_logp_diff = (w * log_w.abs()).sum().item<double>();
  // k3 = (x - 1) - log x with x = rollout / trainer: unbiased, >= 0.
  out.stats.kl = (w * (at::exp(-log_w) - 1.0 + log_w)).sum().item<double>();
  if (r.numel() > 0) {
    out.stats.is_weight_max = r.max().item<double>();
    out.stats.is_weight_min = r.min().item<double>();
  }
  return out;
}

at::Tensor ValueLoss(const at::Tensor& values, const at::Tensor& returns, const at::Tensor& weight) {
  return 0.5 * (weight * (values - returns).square()).sum();
}

at::Tensor SftLoss(const at::Tensor& logp, const at::Tensor& weight) { return -(weight * logp).sum(); }

at::Tensor KlRefPenalty(const at::Tensor& ref_logp, const at::Tensor& logp, const at::Tensor& weight) {
  const at::Tensor d = at::clamp(ref_logp - logp, -kKlRefLogRatioBound, kKlRefLogRatioBound);
  return (weight * at::clamp_max(at::exp(d) - d - 1, kKlRefTokenBound)).sum();
}

}  // namespace kernelrl::learner::rl
