#include "learner/rl/learner_metrics.h"

#include <algorithm>

#include "absl/strings/match.h"

namespace kernelrl::learner::rl {
namespace {

double Get(const std::map<std::string, double>& m, const std::string& k, double otherwise = 0) {
  auto it = m.find(k);
  return it == m.end() ? otherwise : it->second;
}

}  // namespace

LearnerMetrics::LearnerMetrics(MetricsRegistry* r)
    : registry_(r),
      jobs_(r->AddGauge("kernelrl_learner_jobs", "Jobs in each state.", {"state"})),
      paused_jobs_(r->AddGauge("kernelrl_learner_jobs_paused", "RUNNING jobs held by PauseJob (no step expected).").Get()),
      steps_(r->AddCounter("kernelrl_learner_ppo_steps_total",
                           "Optimizer steps committed (PPO, RFT and value pretraining).")
                 .Get()),
      policy_version_(r->AddGauge("kernelrl_learner_policy_version", "Latest committed policy version.").Get()),
      trajectories_(r->AddCounter("kernelrl_learner_trajectories_total", "Pushed trajectories by result.",
                                  {"result"})),
      staleness_(r->AddHistogram("kernelrl_learner_trajectory_staleness_versions",
                                 "Learner policy version minus the trajectory's sampling version, at ingest.", {},
                                 {1, 2, 4, 8, 16})
                     .Get()),
      reward_(r->AddHistogram("kernelrl_learner_reward", "Outcome reward of each trajectory trained on.", {},
                              {-1, -0.5, 0, 0.5, 1, 1.5, 2, 2.5, 3})
                  .Get()),
      step_seconds_(r->AddHistogram("kernelrl_learner_step_seconds", "Wall time of an optimizer step.", {},
                                    ExponentialBuckets(0.05, 2, 14))
                        .Get()),
      loss_(r->AddGauge("kernelrl_learner_loss", "Loss of the last step (policy, value, sft).", {"loss"})),
      grad_norm_(r->AddGauge("kernelrl_learner_grad_norm", "Gradient norm before clipping, last step.", {"model"})),
      is_ratio_(r->AddGauge("kernelrl_learner_is_ratio",
                            "Trainer/rollout importance ratio over the last step's model tokens (mean, max, min).",
                            {"stat"})),
      reward_stat_(r->AddGauge("kernelrl_learner_reward_stat", "Reward over the last step's batch (std, min, max, "
                                                                "positive_frac).",
                               {"stat"})),
      entropy_(r->AddGauge("kernelrl_learner_entropy", "Policy entropy per model token, last step.").Get()),
      explained_variance_(
          r->AddGauge("kernelrl_learner_explained_variance", "Critic explained variance, last step.").Get()),
      clip_fraction_(r->AddGauge("kernelrl_learner_clip_fraction", "Fraction of tokens clipped, last step.").Get()),
      mask_fraction_(r->AddGauge("kernelrl_learner_mask_fraction",
                                 "Fraction of tokens the rollout/trainer mismatch mask removed, last step.")
                         .Get()),
      dual_clip_fraction_(r->AddGauge("kernelrl_learner_dual_clip_fraction",
                                      "Fraction of tokens held by the dual-clip, last step.")
                              .Get()),
      kl_(r->AddGauge("kernelrl_learner_rollout_kl", "k3 KL(rollout || trainer), last step.").Get()),
      length_clipped_(r->AddGauge("kernelrl_learner_response_length_clipped_ratio",
                                  "Trajectories cut at the token or turn limit, last step.")
                          .Get()),
      reward_mean_(r->AddGauge("kernelrl_learner_reward_mean", "Mean outcome reward of the last step's batch.").Get()),
      tokens_per_second_(r->AddGauge("kernelrl_learner_tokens_per_second", "Tokens trained per second, last step.")
                             .Get()),
      mfu_(r->AddGauge("kernelrl_learner_mfu", "Model FLOP utilization vs the bf16 dense peak, last step.").Get()),
      flops_per_second_(
          r->AddGauge("kernelrl_learner_train_flops_per_second", "Training FLOP/s achieved, last step.").Get()),
      buffer_depth_(r->AddGauge("kernelrl_learner_buffer_depth", "Trajectories buffered, not yet trained.").Get()),
      buffer_staleness_(r->AddGauge("kernelrl_learner_buffer_staleness_max_versions",
                                    "Most policy versions a buffered trajectory is behind.")
                            .Get()),
      leases_(r->AddGauge("kernelrl_learner_active_leases", "Task leases held by actors.").Get()),
      tokens_trained_(r->AddCounter("kernelrl_learner_tokens_trained_total", "Tokens trained on.").Get()),
      trajectories_trained_(
          r->AddCounter("kernelrl_learner_trajectories_trained_total", "Trajectories trained on.").Get()) {
  for (int st = v1::Job::PENDING; st <= v1::Job::CANCELLED; ++st) {  // Every state reads, 0 when empty.
    seen_states_.push_back(v1::Job::State_Name(static_cast<v1::Job::State>(st)));
  }
  r->AddCollectHook([this] { Collect(); });
}

LearnerMetrics::~LearnerMetrics() { SetLiveSource(nullptr); }

void LearnerMetrics::SetLiveSource(std::function<Live()> source) {
  absl::MutexLock lock(&mu_);
  source_ = std::move(source);
}

void LearnerMetrics::Collect() {
  absl::MutexLock lock(&mu_);
  if (!source_) return;
  const Live live = source_();
  for (const auto& [state, n] : live.jobs_by_state) {
    if (std::find(seen_states_.begin(), seen_states_.end(), state) == seen_states_.end()) {
      seen_states_.push_back(state);
    }
  }
  for (const std::string& state : seen_states_) {  // A state no job is in any more reads 0, not its last count.
    auto it = live.jobs_by_state.find(state);
    jobs_.Labels({state}).Set(it == live.jobs_by_state.end() ? 0 : it->second);
  }
  paused_jobs_.Set(live.paused_jobs);
  if (live.has_ingest) {
    buffer_depth_.Set(static_cast<double>(live.buffer_depth));
    buffer_staleness_.Set(live.buffer_staleness_max);
    leases_.Set(static_cast<double>(live.active_leases));
  } else {
    buffer_depth_.Set(0), leases_.Set(0), buffer_staleness_.Set(0);
  }
}

std::string LearnerMetrics::PushResult(const v1::PushTrajectoriesAck& ack) {
  const std::string& why = ack.reason();
  if (ack.accepted()) return absl::StartsWith(why, "duplicate") ? "duplicate" : "accepted";
  if (absl::StartsWith(why, "stale")) return "stale";
  if (absl::StartsWith(why, "infra error")) return "infra_error";
  if (absl::StartsWith(why, "buffer full")) return "buffer_full";
  return "rejected";
}

void LearnerMetrics::RecordPush(const v1::PushTrajectoriesAck& ack, int64_t staleness_versions) {
  const std::string result = PushResult(ack);
  trajectories_.Labels({result}).Increment();
  if (staleness_versions >= 0 && (result == "accepted" || result == "stale")) {
    staleness_.Observe(static_cast<double>(staleness_versions));
  }
}

void LearnerMetrics::RecordStep(const std::map<std::string, double>& m, const std::vector<double>& rewards,
                                int64_t policy_version, double peak_flops) {
  steps_.Increment();
  policy_version_.Set(static_cast<double>(policy_version));
  for (double r : rewards) reward_.Observe(r);
  const double seconds = Get(m, "step_seconds");
  step_seconds_.Observe(seconds);
  tokens_trained_.Increment(Get(m, "tokens"));
  trajectories_trained_.Increment(Get(m, "trajectories"));
  for (const char* loss : {"policy", "value", "sft"}) {
    auto it = m.find(std::string(loss) + "_loss");
    if (it != m.end()) loss_.Labels({loss}).Set(it->second);
  }
  for (const char* model : {"actor", "critic"}) {
    auto it = m.find(std::string(model) + "_grad_norm");
    if (it != m.end()) grad_norm_.Labels({model}).Set(it->second);
  }
  if (m.count("is_weight_mean")) {
    is_ratio_.Labels({"mean"}).Set(Get(m, "is_weight_mean"));
    is_ratio_.Labels({"max"}).Set(Get(m, "is_weight_max"));
    is_ratio_.Labels({"min"}).Set(Get(m, "is_weight_min"));
    clip_fraction_.Set(Get(m, "clip_frac"));
    mask_fraction_.Set(Get(m, "mask_frac"));
    dual_clip_fraction_.Set(Get(m, "dual_clip_frac"));
    kl_.Set(Get(m, "kl_rollout"));
  }
  reward_mean_.Set(Get(m, "reward_mean"));
  for (const char* stat : {"std", "min", "max", "positive_frac"}) {
    reward_stat_.Labels({stat}).Set(Get(m, std::string("reward_") + stat));
  }
  if (m.count("entropy")) entropy_.Set(Get(m, "entropy"));
  if (m.count("explained_variance")) explained_variance_.Set(Get(m, "explained_variance"));
  length_clipped_.Set(Get(m, "response_length_clipped_ratio"));
  tokens_per_second_.Set(Get(m, "tokens_per_second"));
  const double flops_per_second = seconds > 0 ? Get(m, "train_flops") / seconds : 0;
  flops_per_second_.Set(flops_per_second);
  if (peak_flops > 0) mfu_.Set(flops_per_second / peak_flops);
  if (m.count("buffer_depth")) buffer_depth_.Set(Get(m, "buffer_depth"));
}

}  // namespace kernelrl::learner::rl
