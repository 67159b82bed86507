#include "learner/rl/trainer_options.h"

namespace kernelrl::learner::rl {

AdamWParams AdamWFromConfig(const v1::OptimizerConfig& o) {
  AdamWParams p;
  p.lr = o.lr(), p.beta1 = o.beta1(), p.beta2 = o.beta2(), p.eps = o.eps();
  p.weight_decay = o.weight_decay(), p.max_grad_norm = o.max_grad_norm();
  p.warmup_steps = o.warmup_steps(), p.decay_steps = o.decay_steps(), p.min_lr_ratio = o.min_lr_ratio();
  p.head_lr_scale = o.head_lr_scale() > 0 ? o.head_lr_scale() : 1.0;
  return p;
}

TrainerOptions TrainerOptionsFromConfig(const v1::LearnerJobConfig& config) {
  const v1::PpoConfig& p = config.ppo();
  TrainerOptions to;
  to.policy_loss.clip_low = p.clip_low();
  to.policy_loss.clip_high = p.clip_high();
  to.policy_loss.dual_clip = p.dual_clip();
  to.policy_loss.mismatch_low = p.mismatch_low();
  to.policy_loss.mismatch_high = p.mismatch_high();
  to.policy_loss.mismatch_mask = p.mismatch_mask() == v1::PpoConfig::SEQUENCE ? MismatchMask::kSequence
                                 : p.mismatch_mask() == v1::PpoConfig::OFF    ? MismatchMask::kOff
                                                                              : MismatchMask::kToken;
  to.advantage = p.task_baseline() ? AdvantageEstimator::kTaskBaseline : AdvantageEstimator::kCritic;
  to.gamma = p.gamma();
  to.lambda = p.lambda();
  to.lambda_length_alpha = p.lambda_length_alpha();
  to.lambda_critic = p.lambda_critic();
  to.aggregation = p.aggregation() == v1::PpoConfig::TOKEN_MEAN ? LossAggregation::kTokenMean
                                                                 : LossAggregation::kTrajectoryMean;
  to.epochs = std::max(1, p.epochs());
  to.minibatches = std::max(1, p.minibatches());
  to.critic_epochs = std::max(to.epochs, p.critic_epochs());
  to.temperature = p.temperature();
  to.entropy_metric = p.entropy_metric();
  to.normalize_advantages = p.normalize_advantages();
  to.entropy_coef = p.entropy_coef();
  to.kl_ref_coef = p.kl_ref_coef();
  to.max_tokens_per_row = config.batch().max_tokens_per_row();
  to.actor = AdamWFromConfig(config.actor_optimizer());
  to.critic = AdamWFromConfig(config.critic_optimizer());
  return to;
}

}  // namespace kernelrl::learner::rl
