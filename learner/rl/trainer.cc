#include "learner/rl/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "learner/rl/gae.h"

namespace kernelrl::learner::rl {
namespace {

// The model tokens of one packed row, flattened in sample order. Token k is
// ids[p] of its sample (p >= 1, loss_mask[p] == 1); the state predicting it
// is row position offset + p - 1.
struct RowTokens {
  std::vector<int64_t> state, target;
  std::vector<float> rollout_logp, weight;
  std::vector<int> sample;             // Index into the batch, per row segment.
  std::vector<int64_t> begin, end;     // Per segment: [begin, end) into the flat arrays.
};

// weight[i]: the loss weight of each model token of sample i (ppo_loss.h).
RowTokens GatherRow(const std::vector<Sample>& batch, const PackedRow& row, const std::vector<double>& weight) {
  RowTokens rt;
  int64_t offset = 0;
  for (int i : row.samples) {
    const Sample& s = batch[i];
    const double w = weight[i];
    rt.sample.push_back(i);
    rt.begin.push_back(static_cast<int64_t>(rt.state.size()));
    for (size_t p = 1; p < s.ids.size(); ++p) {
      if (s.loss_mask[p] == 0) continue;
      rt.state.push_back(offset + static_cast<int64_t>(p) - 1);
      rt.target.push_back(s.ids[p]);
      rt.rollout_logp.push_back(s.rollout_logprobs[p]);
      rt.weight.push_back(static_cast<float>(w));
    }
    rt.end.push_back(static_cast<int64_t>(rt.state.size()));
    offset += static_cast<int64_t>(s.ids.size());
  }
  return rt;
}

at::Tensor RowIds(const std::vector<Sample>& batch, const PackedRow& row) {
  std::vector<int64_t> ids;
  ids.reserve(row.tokens);
  for (int i : row.samples) ids.insert(ids.end(), batch[i].ids.begin(), batch[i].ids.end());
  return at::tensor(ids, at::kLong).unsqueeze(0);  // [1,T]
}

template <typename T>
at::Tensor ToDevice(const std::vector<T>& v, at::ScalarType type, at::Device device) {
  return at::tensor(v, type).to(device);
}

// Training FLOPs of one forward + backward over a row (6 N T for the
// matrices, causal attention per packed sequence, the LM head on the M
// selected positions); recomputation for checkpointing is not counted.
// With LoRA adapters of rank r the frozen matrices take no weight-gradient
// GEMM (4 N T) and the adapters add their own 6 N_r T.
double RowFlops(const ModelConfig& c, const PackedRow& row, int64_t head_rows, bool lm_head, int64_t lora_rank) {
  const double H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  const double q = c.num_heads * D, kv = c.num_kv_heads * D;
  const double per_layer = H * (q + 2 * kv) + q * H + 3 * H * I;
  const double passes = lora_rank > 0 ? 4.0 : 6.0;
  double flops = passes * per_layer * c.num_layers * row.tokens;
  if (lora_rank > 0) {
    flops += 6.0 * static_cast<double>(c.AdapterParametersPerLayer(lora_rank)) * c.num_layers * row.tokens;
  }
  for (int64_t n : row.lengths) flops += 6.0 * c.num_layers * q * static_cast<double>(n) * n;  // QK^T and PV, causal
  if (lm_head) flops += passes * H * c.vocab_size * head_rows;
  return flops;
}

// Position of each flat token in its row's segment list (the sequence mask).
std::vector<int64_t> SegmentIndex(const RowTokens& rt) {
  std::vector<int64_t> seq(rt.state.size());
  for (size_t j = 0; j < rt.begin.size(); ++j) {
    for (int64_t k = rt.begin[j]; k < rt.end[j]; ++k) seq[k] = static_cast<int64_t>(j);
  }
  return seq;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Metrics that add up over rows and ranks (losses and their statistics are
// already weighted by 1/(T_i N)), and those reduced by maximum ("-x" holds
// -x so that a maximum gives the minimum).
// The sums behind explained_variance over a step's model tokens (ExplainedVarianceOfSums); kept in
// a critic step's metrics, where a reader pools them over a stage's updates.
constexpr const char* kExplainedVarianceSums[] = {"ev_tokens", "ev_target_sum", "ev_target_sq_sum", "ev_residual_sum",
                                                  "ev_residual_sq_sum"};
constexpr const char* kSummedMetrics[] = {
    "policy_loss", "value_loss", "sft_loss", "entropy", "clip_frac", "dual_clip_frac", "mask_frac", "is_weight_mean",
    "logp_abs_diff", "kl_rollout", "kl_ref", "advantage_mean", "trajectories", "tokens", "model_tokens", "rows",
    "train_flops", "reward_sum", "reward_sq", "reward_positive", "length_clipped", "ev_tokens", "ev_target_sum",
    "ev_target_sq_sum", "ev_residual_sum", "ev_residual_sq_sum", "ev95_r", "ev95_r2", "ev95_d", "ev95_d2"};
constexpr const char* kMaxedMetrics[] = {"reward_max", "-reward_min", "is_weight_max", "-is_weight_min",
                                         "step_seconds"};

absl::Status ReduceMetrics(Collectives& c, at::Device device, StepMetrics* m) {
  std::vector<double> sums, maxima;
  for (const char* k : kSummedMetrics) sums.push_back((*m)[k]);
  for (const char* k : kMaxedMetrics) maxima.push_back((*m)[k]);
  std::vector<at::Tensor> s = {at::tensor(sums, at::kDouble).to(device)};
  std::vector<at::Tensor> x = {at::tensor(maxima, at::kDouble).to(device)};
  if (auto st = c.AllReduceSum(s); !st.ok()) return st;
  if (auto st = c.AllReduceMax(x); !st.ok()) return st;
  const at::Tensor sc = s[0].to(at::kCPU), xc = x[0].to(at::kCPU);
  for (size_t i = 0; i < sums.size(); ++i) (*m)[kSummedMetrics[i]] = sc[i].item<double>();
  for (size_t i = 0; i < maxima.size(); ++i) (*m)[kMaxedMetrics[i]] = xc[i].item<double>();
  return absl::OkStatus();
}

// The reported figures from the (reduced) sums; helper sums are removed.
void FinishMetrics(bool ppo, bool critic, StepMetrics* mp) {
  StepMetrics& m = *mp;
  const double n = m["trajectories"];
  const double r_mean = n > 0 ? m["reward_sum"] / n : 0;
  m["reward_mean"] = r_mean;
  m["reward_std"] = n > 0 ? std::sqrt(std::max(0.0, m["reward_sq"] / n - r_mean * r_mean)) : 0;
  m["reward_min"] = -m["-reward_min"];
  m["reward_positive_frac"] = n > 0 ? m["reward_positive"] / n : 0;
  m["response_length_clipped_ratio"] = n > 0 ? m["length_clipped"] / n : 0;
  if (critic) {  // 1 - Var(targets - values) / Var(targets), over all model tokens.
    auto ev = [&](const char* r, const char* r2, const char* d, const char* d2) {
      return ExplainedVarianceOfSums(m["ev_tokens"], m[r], m[r2], m[d], m[d2]);
    };
    m["explained_variance"] =  // The critic's own targets.
        ev("ev_target_sum", "ev_target_sq_sum", "ev_residual_sum", "ev_residual_sq_sum");
    m["explained_variance_gae95"] = ev("ev95_r", "ev95_r2", "ev95_d", "ev95_d2");
  }
  if (ppo) {
    m["is_weight_min"] = -m["-is_weight_min"];
  } else {
    for (const char* k : {"policy_loss", "clip_frac", "dual_clip_frac", "mask_frac", "is_weight_mean", "logp_abs_diff",
                          "kl_rollout", "kl_ref", "advantage_mean", "is_weight_max"}) {
      m.erase(k);
    }
  }
  if (critic && !ppo) m.erase("entropy");
  if (!critic) {
    m.erase("value_loss");
    for (const char* k : kExplainedVarianceSums) m.erase(k);
  }
  if (ppo || critic) m.erase("sft_loss");
  // The sums behind explained_variance stay (ev_tokens, ev_target_sum, ...): a reader pools them over
  // a stage's updates, where one batch of near-equal rewards makes its own figure a ratio of two tiny
  // variances.
  for (const char* k : {"reward_sum", "reward_sq", "reward_positive", "length_clipped", "ev95_r", "ev95_r2",
                        "ev95_d", "ev95_d2", "-reward_min", "-is_weight_min"}) {
    m.erase(k);
  }
  m["tokens_per_second"] = m["step_seconds"] > 0 ? m["tokens"] / m["step_seconds"] : 0;
}

}  // namespace

// ---- AdamW ----

AdamW::AdamW(std::vector<at::Tensor> params, AdamWParams p, std::vector<bool> decay, std::vector<bool> head)
    : p_(p), params_(std::move(params)), decay_(std::move(decay)), head_(std::move(head)) {
  at::NoGradGuard no_grad;
  separate_master_ = !params_.empty() && params_[0].scalar_type() != at::kFloat;
  if (decay_.size() != params_.size()) {  // Default: matrices decay, vectors (norms, biases) do not.
    decay_.clear();
    for (const at::Tensor& w : params_) decay_.push_back(w.dim() >= 2);
  }
  head_.resize(params_.size(), false);
  for (const at::Tensor& w : params_) {
    master_.push_back(separate_master_ ? w.detach().to(at::kFloat).clone() : w.detach());
    exp_avg_.push_back(at::zeros_like(master_.back()));
    exp_avg_sq_.push_back(at::zeros_like(master_.back()));
    steps_.push_back(at::zeros({}, master_.back().options()));
  }
}

void AdamW::SyncMasterFromParams() {
  at::NoGradGuard no_grad;
  if (!separate_master_) return;  // fp32 weights are their own master.
  for (size_t i = 0; i < params_.size(); ++i) master_[i].copy_(params_[i].detach());
}

void AdamW::ZeroGrad() {
  for (at::Tensor& w : params_) w.mutable_grad() = at::Tensor();
}

void AdamW::Reset() {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    exp_avg_[i].zero_(), exp_avg_sq_[i].zero_(), steps_[i].zero_();
  }
  step_count_ = 0;
}

double AdamW::ScheduleFactor() const {
  const double t = static_cast<double>(step_count_ + 1);  // The step about to be taken, from 1.
  if (p_.warmup_steps > 0 && t <= p_.warmup_steps) return t / static_cast<double>(p_.warmup_steps);
  if (p_.decay_steps <= 0) return 1.0;
  const double progress = std::min(1.0, (t - std::max<int64_t>(p_.warmup_steps, 0)) / p_.decay_steps);
  return p_.min_lr_ratio + (1.0 - p_.min_lr_ratio) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

double AdamW::Step() {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;  // fp32
  for (at::Tensor& w : params_) {
    grads.push_back(w.grad().defined() ? w.grad().to(at::kFloat) : at::zeros_like(w, at::kFloat));
  }
  const double norm = at::stack(at::_foreach_norm(grads)).norm().item<double>();
  if (p_.max_grad_norm > 0 && norm > p_.max_grad_norm) at::_foreach_mul_(grads, p_.max_grad_norm / (norm + 1e-6));
  const double lr = p_.lr * ScheduleFactor();
  at::_foreach_add_(steps_, 1.0);
  for (bool decay : {true, false}) {
    for (bool head : {false, true}) {
      std::vector<at::Tensor> m, g, a, s, st;
      for (size_t i = 0; i < params_.size(); ++i) {
        if (decay_[i] != decay || head_[i] != head) continue;
        m.push_back(master_[i]), g.push_back(grads[i]), a.push_back(exp_avg_[i]), s.push_back(exp_avg_sq_[i]);
        st.push_back(steps_[i]);
      }
      if (m.empty()) continue;
      at::_fused_adamw_(m, g, a, s, {}, st, head ? lr * p_.head_lr_scale : lr, p_.beta1, p_.beta2,
                        decay ? p_.weight_decay : 0.0, p_.eps, /*amsgrad=*/false, /*maximize=*/false);
    }
  }
  if (separate_master_) {
    for (size_t i = 0; i < params_.size(); ++i) params_[i].detach().copy_(master_[i]);
  }
  ++step_count_;
  ZeroGrad();
  return norm;
}

std::map<std::string, at::Tensor> AdamW::State(const std::string& prefix) const {
  std::map<std::string, at::Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string p = absl::StrCat(prefix, i, "/");
    out[p + "exp_avg"] = exp_avg_[i].to(at::kCPU);
    out[p + "exp_avg_sq"] = exp_avg_sq_[i].to(at::kCPU);
    out[p + "step"] = steps_[i].to(at::kCPU).reshape({1});
    if (separate_master_) out[p + "master"] = master_[i].to(at::kCPU);
  }
  return out;
}

absl::Status AdamW::LoadState(const std::map<std::string, at::Tensor>& state, const std::string& prefix) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string p = absl::StrCat(prefix, i, "/");
    std::vector<std::pair<std::string, at::Tensor*>> parts = {
        {"exp_avg", &exp_avg_[i]}, {"exp_avg_sq", &exp_avg_sq_[i]}, {"step", &steps_[i]}};
    if (separate_master_) parts.push_back({"master", &master_[i]});
    for (auto& [name, dst] : parts) {
      auto it = state.find(p + name);
      if (it == state.end()) return absl::DataLossError(absl::StrCat("optimizer state lacks ", p, name));
      if (it->second.numel() != dst->numel()) {
        return absl::DataLossError(absl::StrCat("optimizer state ", p, name, " has ", it->second.numel(),
                                                " elements, expected ", dst->numel()));
      }
      dst->copy_(it->second.reshape(dst->sizes()));
    }
    if (separate_master_) params_[i].detach().copy_(master_[i]);
  }
  step_count_ = steps_.empty() ? 0 : static_cast<int64_t>(steps_[0].item<double>());
  return absl::OkStatus();
}

// ---- Trainer ----

namespace {

// Weight decay and the head's learning rate per parameter of a model
// (Transformer::parameters() order: the value head last). No decay on the
// embedding, norms, biases and the value head; the value head ([1,H]
// weight, [1] bias) is the `head`. LoRA adapters are matrices: decayed.
AdamW MakeAdamW(const Transformer& model, const AdamWParams& p) {
  std::vector<at::Tensor> params = model.parameters();
  std::vector<bool> decay, head;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& w = params[i];
    const bool value_head = model.head() == Head::kValue && i + 2 >= params.size() && w.size(0) == 1 &&
                            (w.dim() == 1 || w.dim() == 2);
    const bool embedding = w.is_same(model.root_weights().embed);
    head.push_back(value_head);
    decay.push_back(!embedding && w.dim() >= 2 && !value_head);
  }
  return AdamW(std::move(params), p, std::move(decay), std::move(head));
}

}  // namespace

absl::Status Trainer::BroadcastParameters() {
  if (collectives_ == nullptr) return absl::OkStatus();
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> params;  // A sharded model's ranks each hold a different part.
  if (!actor_opt_->sharded()) params = policy_->parameters();
  if (critic_ && !critic_opt_->sharded()) {
    for (const at::Tensor& p : critic_->parameters()) params.push_back(p);
  }
  std::vector<at::Tensor> detached;
  for (at::Tensor& p : params) detached.push_back(p.detach());
  if (auto s = collectives_->Broadcast(detached, 0); !s.ok()) return s;
  // AdamW's fp32 master copies follow the broadcast weights.
  for (AdamW* opt : {actor_opt_.get(), critic_opt_.get()}) {
    if (opt != nullptr) opt->SyncMasterFromParams();
  }
  return absl::OkStatus();
}

Trainer::Trainer(std::unique_ptr<Transformer> policy, std::unique_ptr<Transformer> critic, TrainerOptions options)
    : policy_(std::move(policy)), critic_(std::move(critic)), options_(options) {
  auto make = [this](Transformer& model, const AdamWParams& p) -> std::unique_ptr<AdamW> {
    if (options_.make_optimizer) return options_.make_optimizer(model, p);
    return std::make_unique<AdamW>(MakeAdamW(model, p));
  };
  actor_opt_ = make(*policy_, options_.actor);
  if (critic_) critic_opt_ = make(*critic_, options_.critic);
  // A critic loaded with its trained head (a critic checkpoint) keeps it: only a fresh head is initialised.
  critic_head_ready_ = critic_ != nullptr && critic_->value_head_loaded();
}

std::map<std::string, at::Tensor> Trainer::State() const {
  std::map<std::string, at::Tensor> s = {
      {"trainer/objective", at::tensor({static_cast<int64_t>(last_objective_)}, at::kLong)},
      {"trainer/critic_head_ready", at::tensor({static_cast<int64_t>(critic_head_ready_)}, at::kLong)}};
  if (ref_policy_ != nullptr) {
    const std::vector<at::Tensor> ps = ref_policy_->parameters();
    for (size_t i = 0; i < ps.size(); ++i) s[absl::StrCat("trainer/kl_ref/", i)] = ps[i].detach().to(at::kCPU);
  }
  return s;
}

absl::Status Trainer::LoadState(const std::map<std::string, at::Tensor>& state) {
  auto it = state.find("trainer/objective");
  if (it != state.end()) last_objective_ = static_cast<int>(it->second.item<int64_t>());
  it = state.find("trainer/critic_head_ready");
  critic_head_ready_ = it == state.end() || it->second.item<int64_t>() != 0;
  if (!state.count("trainer/kl_ref/0")) return absl::OkStatus();
  // The reference a PPO stage took: a copy of the actor's shape holding the saved weights.
  if (auto s = TakeKlReference(); !s.ok()) return s;
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> ps = ref_policy_->parameters();
  for (size_t i = 0; i < ps.size(); ++i) {
    auto t = state.find(absl::StrCat("trainer/kl_ref/", i));
    if (t == state.end() || !t->second.sizes().equals(ps[i].sizes())) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint's KL reference: tensor ", i, " is missing or misshapen"));
    }
    ps[i].copy_(t->second);
  }
  if (state.count(absl::StrCat("trainer/kl_ref/", ps.size()))) {
    return absl::InvalidArgumentError("checkpoint's KL reference has more tensors than the actor");
  }
  return absl::OkStatus();
}

absl::Status Trainer::TakeKlReference() {
  auto ref = policy_->MergedCopy(policy_->options());
  if (!ref.ok()) return absl::FailedPreconditionError(absl::StrCat("ppo.kl_ref_coef: ", ref.status().message()));
  ref_policy_ = *std::move(ref);
  return absl::OkStatus();
}

absl::StatusOr<StepMetrics> Trainer::SftStep(const std::vector<Sample>& batch, int64_t global_trajectories) {
  return Step(batch, global_trajectories, Objective::kSft);
}
absl::StatusOr<StepMetrics> Trainer::ValueStep(const std::vector<Sample>& batch, int64_t global_trajectories) {
  return Step(batch, global_trajectories, Objective::kValue);
}

absl::StatusOr<StepMetrics> Trainer::CriticReplayStep(const std::vector<Sample>& batch, int64_t global_trajectories) {
  return Step(batch, global_trajectories, Objective::kValue, Objective::kPpo);
}

absl::StatusOr<StepMetrics> Trainer::Step(const std::vector<Sample>& batch, int64_t global_trajectories,
                                          Objective objective, std::optional<Objective> stage) {
  const double n = global_trajectories > 0 ? global_trajectories : static_cast<double>(batch.size());
  auto m = Update(batch, n, objective, stage);
  if (!m.ok()) return m.status();
  FinishMetrics(objective == Objective::kPpo, m->count("ev_tokens") > 0 && objective != Objective::kSft, &*m);
  return m;
}

// epochs x minibatches updates. The batch's figures (rewards, tokens, losses,
// fractions) are the mean over epochs of the summed mini-batch figures;
// explained variance comes from the first epoch (values before any update
// on this batch); grad norms and learning rates are means over the updates.
absl::StatusOr<StepMetrics> Trainer::PpoStep(const std::vector<Sample>& batch, int64_t global_trajectories) {
  const bool data_parallel = collectives_ != nullptr && collectives_->world_size() > 1;
  const int epochs = std::max(1, options_.epochs);
  // Every rank runs the same number of updates (collectives pair up); one rank never makes an empty one.
  const int mbs = data_parallel ? std::max(1, options_.minibatches)
                                : std::max(1, std::min<int>(options_.minibatches, static_cast<int>(batch.size())));
  const double n = (global_trajectories > 0 ? global_trajectories : static_cast<double>(batch.size())) / mbs;
  std::set<std::string> summed(std::begin(kSummedMetrics), std::end(kSummedMetrics));
  std::set<std::string> maxed(std::begin(kMaxedMetrics), std::end(kMaxedMetrics));
  StepMetrics acc;
  std::map<std::string, int> counts;
  auto minibatch = [&](int k) {
    return std::vector<Sample>(batch.begin() + batch.size() * k / mbs, batch.begin() + batch.size() * (k + 1) / mbs);
  };
  for (int e = 0; e < epochs; ++e) {
    for (int k = 0; k < mbs; ++k) {
      auto m = Update(minibatch(k), n, Objective::kPpo);
      if (!m.ok()) return m.status();
      for (const auto& [key, v] : *m) {
        const bool ev = key.rfind("ev_", 0) == 0;
        if (ev && e > 0) continue;
        if (key == "step_seconds" || key == "train_flops" || ev) {
          acc[key] += v;
        } else if (summed.count(key)) {
          acc[key] += v / epochs;
        } else if (maxed.count(key)) {
          acc[key] = counts[key]++ == 0 ? v : std::max(acc[key], v);
        } else {
          acc[key] += v, counts[key] += 1;
        }
      }
    }
  }
  for (const auto& [key, c] : counts) {
    if (!maxed.count(key) && c > 0) acc[key] /= c;
  }
  acc["updates"] = static_cast<double>(epochs * mbs);
  // The critic's own passes: the same mini-batches and targets, the actor left as it is.
  const bool critic_passes = critic_ != nullptr && options_.critic_epochs > epochs;
  for (int e = epochs; critic_passes && e < options_.critic_epochs; ++e) {
    for (int k = 0; k < mbs; ++k) {
      auto m = Update(minibatch(k), n, Objective::kValue, Objective::kPpo);
      if (!m.ok()) return m.status();
      acc["critic_only_updates"] += 1;
      if (k == 0) acc["value_loss_last_pass"] = 0;
      acc["value_loss_last_pass"] += (*m)["value_loss"];
    }
  }
  FinishMetrics(/*ppo=*/true, acc.count("ev_tokens") > 0, &acc);
  return acc;
}

void Trainer::RowTargets(const std::vector<int>& samples, const std::vector<int64_t>& begin,
                         const std::vector<int64_t>& end, const std::vector<Sample>& batch, const float* v,
                         std::vector<float>* adv, std::vector<float>* ret) const {
  for (size_t j = 0; j < samples.size(); ++j) {
    const Sample& s = batch[samples[j]];
    const int n = static_cast<int>(end[j] - begin[j]);
    const std::vector<float> rewards = OutcomeRewards(n, s.reward);
    std::vector<float> seg = v != nullptr ? std::vector<float>(v + begin[j], v + end[j]) : std::vector<float>(n, 0);
    if (v != nullptr) {  // The critic's targets: its own lambda, on the raw reward.
      GaeResult c = Gae(rewards, seg, options_.gamma, options_.lambda_critic);
      ret->insert(ret->end(), c.returns.begin(), c.returns.end());
    }
    if (options_.advantage == AdvantageEstimator::kTaskBaseline) {
      adv->insert(adv->end(), n, static_cast<float>(s.reward - s.baseline));
    } else {
      const double lambda =
          options_.lambda_length_alpha > 0 ? LengthAdaptiveLambda(n, options_.lambda_length_alpha) : options_.lambda;
      GaeResult a = Gae(rewards, seg, options_.gamma, lambda);
      adv->insert(adv->end(), a.advantages.begin(), a.advantages.end());
    }
  }
}

absl::StatusOr<std::vector<std::vector<float>>> Trainer::CriticValues(const std::vector<Sample>& batch) {
  if (!critic_) return absl::FailedPreconditionError("no critic");
  at::NoGradGuard no_grad;
  const at::Device device = critic_->options().device;
  std::vector<std::vector<float>> out(batch.size());
  const std::vector<double> unit(batch.size(), 1.0);
  for (const PackedRow& row : PackRows(batch, options_.max_tokens_per_row)) {
    const RowTokens rt = GatherRow(batch, row, unit);
    const at::Tensor ids = RowIds(batch, row).to(device);
    const at::Tensor state = ToDevice(rt.state, at::kLong, device);
    at::Tensor v = critic_->Values(critic_->Hidden(ids, row.lengths)[0].index_select(0, state))
                       .to(at::kCPU, at::kFloat)
                       .contiguous();
    for (size_t j = 0; j < rt.sample.size(); ++j) {
      out[rt.sample[j]].assign(v.data_ptr<float>() + rt.begin[j], v.data_ptr<float>() + rt.end[j]);
    }
  }
  return out;
}

absl::StatusOr<int64_t> Trainer::Passes(size_t rows, bool actor, bool critic, at::Device device) {
  const bool sharded = (actor && actor_opt_->sharded()) || (critic && critic_opt_ && critic_opt_->sharded());
  if (!sharded || collectives_ == nullptr) return static_cast<int64_t>(rows);
  std::vector<at::Tensor> t = {at::tensor(std::vector<double>{static_cast<double>(rows)}, at::kDouble).to(device)};
  if (auto s = collectives_->AllReduceMax(t); !s.ok()) return s;
  return static_cast<int64_t>(t[0].item<double>());
}

void Trainer::EmptyPass(bool actor, bool critic, at::Device device) {
  const at::Tensor ids = at::zeros({1, 1}, at::TensorOptions().dtype(at::kLong).device(device));
  at::Tensor loss = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
  if (critic) loss = loss + critic_->Values(critic_->Hidden(ids)[0]).sum();
  if (actor) loss = loss + policy_->TokenLogprobs(policy_->Hidden(ids)[0], ids[0]).sum();
  if (loss.requires_grad()) loss.mul(0.0).backward();
}

absl::StatusOr<std::pair<double, double>> Trainer::AdvantageMoments(const std::vector<Sample>& batch,
                                                                     const std::vector<PackedRow>& rows,
                                                                     at::Device device) {
  at::NoGradGuard no_grad;
  const bool need_values = options_.advantage == AdvantageEstimator::kCritic;
  double sum = 0, sq = 0, n = 0;
  const std::vector<double> unit(batch.size(), 1.0);
  auto passes = Passes(rows.size(), false, true, device);
  if (!passes.ok()) return passes.status();
  for (int64_t pass = static_cast<int64_t>(rows.size()); pass < *passes; ++pass) {
    EmptyPass(false, true, device);
  }
  for (const PackedRow& row : rows) {
    const RowTokens rt = GatherRow(batch, row, unit);
    at::Tensor v_cpu;
    if (need_values) {
      const at::Tensor ids = RowIds(batch, row).to(device);
      const at::Tensor state = ToDevice(rt.state, at::kLong, device);
      v_cpu = critic_->Values(critic_->Hidden(ids, row.lengths)[0].index_select(0, state))
                  .to(at::kCPU, at::kFloat)
                  .contiguous();
    }
    std::vector<float> adv, ret;
    RowTargets(rt.sample, rt.begin, rt.end, batch, need_values ? v_cpu.data_ptr<float>() : nullptr, &adv, &ret);
    for (float a : adv) sum += a, sq += static_cast<double>(a) * a, n += 1;
  }
  if (collectives_ != nullptr) {
    std::vector<at::Tensor> t = {at::tensor(std::vector<double>{sum, sq, n}, at::kDouble).to(device)};
    if (auto s = collectives_->AllReduceSum(t); !s.ok()) return s;
    const at::Tensor c = t[0].to(at::kCPU);
    sum = c[0].item<double>(), sq = c[1].item<double>(), n = c[2].item<double>();
  }
  if (n == 0) return std::make_pair(0.0, 1.0);
  const double mean = sum / n;
  // A batch whose advantages are all equal carries no preference: unit scale, zero after centring.
  const double std = std::sqrt(std::max(0.0, sq / n - mean * mean));
  return std::make_pair(mean, std > 1e-6 ? std : 1.0);
}

absl::Status SetResidentValueHead(Transformer& critic, const at::Tensor& weight, const at::Tensor& bias) {
  std::vector<at::Tensor> params = critic.parameters();
  if (params.empty()) return absl::FailedPreconditionError("critic without parameters");
  at::Tensor w = params.size() >= 2 && params.back().dim() == 1 ? params[params.size() - 2] : params.back();
  at::Tensor b = params.back().dim() == 1 ? params.back() : at::Tensor();
  if (w.numel() != weight.numel()) {
    return absl::InvalidArgumentError(absl::StrCat("value head: ", weight.numel(), " values for ", w.numel()));
  }
  at::NoGradGuard no_grad;
  w.detach().copy_(weight.reshape(w.sizes()));
  if (b.defined()) b.detach().copy_(bias.reshape(b.sizes()));
  return absl::OkStatus();
}

absl::Status Trainer::InitValueHead(const std::vector<Sample>& batch, at::Device device) {
  double sum = 0, n = static_cast<double>(batch.size());
  for (const Sample& s : batch) sum += s.reward;
  if (collectives_ != nullptr) {
    std::vector<at::Tensor> t = {at::tensor(std::vector<double>{sum, n}, at::kDouble).to(device)};
    if (auto s = collectives_->AllReduceSum(t); !s.ok()) return s;
    const at::Tensor c = t[0].to(at::kCPU);
    sum = c[0].item<double>(), n = c[1].item<double>();
  }
  at::NoGradGuard no_grad;
  // The same draw on every rank: a fixed generator, not the global RNG.
  at::Generator gen = at::detail::createCPUGenerator(0x5eed);
  const int64_t hidden = critic_->config().hidden_size;
  const at::Tensor w = at::normal(0.0, options_.value_head_init_std, {1, hidden}, gen, at::TensorOptions(at::kFloat));
  const at::Tensor b = at::full({1}, n > 0 ? sum / n : 0.0, at::TensorOptions(at::kFloat));
  auto set = options_.set_value_head ? options_.set_value_head : SetResidentValueHead;
  if (auto s = set(*critic_, w, b); !s.ok()) return s;
  critic_opt_->SyncMasterFromParams();
  critic_head_ready_ = true;
  return absl::OkStatus();
}

absl::StatusOr<StepMetrics> Trainer::Update(const std::vector<Sample>& batch, double n_global, Objective objective,
                                            std::optional<Objective> stage) {
  const bool train_actor = objective != Objective::kValue;
  const bool baseline = options_.advantage == AdvantageEstimator::kTaskBaseline;
  // The critic trains in value pretraining and PPO; with the per-task baseline it is optional.
  const bool use_critic = objective == Objective::kValue || (objective == Objective::kPpo && critic_ != nullptr);
  const bool data_parallel = collectives_ != nullptr && collectives_->world_size() > 1;
  if (batch.empty() && !data_parallel) return absl::InvalidArgumentError("empty batch");
  if (use_critic && !critic_) return absl::FailedPreconditionError("this step needs a critic");
  if (objective == Objective::kPpo && !baseline && !critic_) {
    return absl::FailedPreconditionError("PPO with the critic estimator needs a critic");
  }
  const auto start = std::chrono::steady_clock::now();
  const at::Device device = policy_->options().device;
  const int64_t vocab = policy_->config().vocab_size;
  for (const Sample& s : batch) {
    for (int32_t id : s.ids) {
      if (id < 0 || id >= vocab) return absl::InvalidArgumentError(absl::StrCat(s.id, ": token id ", id, " >= vocab"));
    }
    if (objective == Objective::kPpo && !baseline && s.baseline != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          s.id, ": a per-task baseline with the critic estimator (the two are alternatives, never stacked)"));
    }
  }
  StepMetrics m;
  // A new objective is a new stage: its optimizers start from zero moments and their own schedule.
  const int stage_objective = static_cast<int>(stage.value_or(objective));
  if (last_objective_ >= 0 && last_objective_ != stage_objective) {
    actor_opt_->Reset();
    if (critic_opt_) critic_opt_->Reset();
    m["optimizer_reset"] = 1;
  }
  // The KL penalty's reference: the actor as this PPO stage found it.
  const bool kl_ref = objective == Objective::kPpo && train_actor && options_.kl_ref_coef > 0;
  if (kl_ref && (ref_policy_ == nullptr || last_objective_ != stage_objective)) {
    if (auto s = TakeKlReference(); !s.ok()) return s;
    m["kl_ref_taken"] = 1;
  }
  last_objective_ = stage_objective;
  if (use_critic && !critic_head_ready_) {
    if (options_.value_head_init) {
      if (auto s = InitValueHead(batch, device); !s.ok()) return s;
      m["value_head_init"] = 1;
    }
    critic_head_ready_ = true;
  }
  // For explained variance: against the critic's targets, and against the paper's
  // value-pretraining targets V + GAE(gamma 1, lambda 0.95) (PaperValueTargets).
  std::vector<float> all_values, all_returns, all_gae95;
  double flops = 0, is_max = 0, is_min = HUGE_VAL;
  int64_t tokens = 0, model_tokens = 0;

  // 1. Loss weights per sample (ppo_loss.h): 1/(T_i N), or 1/(model tokens of the global batch).
  std::vector<double> weight(batch.size());
  double total_model = 0;
  for (const Sample& s : batch) total_model += static_cast<double>(s.model_tokens());
  if (options_.aggregation == LossAggregation::kTokenMean && collectives_ != nullptr) {
    std::vector<at::Tensor> t = {at::tensor(std::vector<double>{total_model}, at::kDouble).to(device)};
    if (auto s = collectives_->AllReduceSum(t); !s.ok()) return s;
    total_model = t[0].to(at::kCPU)[0].item<double>();
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    weight[i] = options_.aggregation == LossAggregation::kTokenMean && objective != Objective::kSft
                    ? 1.0 / std::max(1.0, total_model)
                    : 1.0 / (static_cast<double>(batch[i].model_tokens()) * n_global);
  }

  // 2. Sequence packing: trajectories share rows of <= max_tokens_per_row tokens.
  const std::vector<PackedRow> rows = PackRows(batch, options_.max_tokens_per_row);

  // 2b. PPO with normalised advantages: their mean and standard deviation over
  //     every rank's model tokens first, from a critic pass without gradients
  //     (step 4 recomputes the same values with them).
  const bool normalize = objective == Objective::kPpo && options_.normalize_advantages;
  double adv_mean = 0, adv_std = 1;
  if (normalize) {
    auto moments = AdvantageMoments(batch, rows, device);
    if (!moments.ok()) return moments.status();
    std::tie(adv_mean, adv_std) = *moments;
    m["advantage_raw_mean"] = adv_mean, m["advantage_raw_std"] = adv_std;
  }
  // 1c. Sharded models gather their weights in every forward and backward,
  //     collectives all ranks must join: every rank runs as many passes as
  //     the rank with the most rows, the extra ones empty (zero loss).
  auto passes = Passes(rows.size(), train_actor, use_critic, device);
  if (!passes.ok()) return passes.status();
  for (int64_t pass = static_cast<int64_t>(rows.size()); pass < *passes; ++pass) {
    EmptyPass(train_actor, use_critic, device);
  }
  for (const PackedRow& row : rows) {
    // 3. The row's model tokens: state positions, targets, rollout log-probs, weights.
    const RowTokens rt = GatherRow(batch, row, weight);
    const at::Tensor ids = RowIds(batch, row).to(device);                        // [1,T]
    const at::Tensor state = ToDevice(rt.state, at::kLong, device);              // [M]
    const at::Tensor target = ToDevice(rt.target, at::kLong, device);            // [M]
    const at::Tensor rollout_logp = ToDevice(rt.rollout_logp, at::kFloat, device);  // [M]
    const at::Tensor w = ToDevice(rt.weight, at::kFloat, device);                // [M]
    tokens += row.tokens;
    model_tokens += static_cast<int64_t>(rt.state.size());

    // 4. Critic: V(state) per model token (differentiable); on the detached
    //    values, per trajectory: the critic's targets (lambda_critic, raw
    //    reward) and the actor's advantages (GAE with the actor's lambda, or
    //    reward - baseline).
    at::Tensor values, advantages, returns;
    std::vector<float> adv, ret;
    if (use_critic) {
      at::Tensor hidden = critic_->Hidden(ids, row.lengths)[0];   // [T,H]
      values = critic_->Values(hidden.index_select(0, state));    // [M]
      at::Tensor v_cpu = values.detach().to(at::kCPU, at::kFloat).contiguous();
      const float* v = v_cpu.data_ptr<float>();
      RowTargets(rt.sample, rt.begin, rt.end, batch, v, &adv, &ret);
      for (size_t j = 0; j < rt.sample.size(); ++j) {
        const std::vector<float> seg(v + rt.begin[j], v + rt.end[j]);
        const std::vector<float> t = PaperValueTargets(seg, batch[rt.sample[j]].reward);
        all_gae95.insert(all_gae95.end(), t.begin(), t.end());
      }
      all_values.insert(all_values.end(), v, v + v_cpu.numel());
      all_returns.insert(all_returns.end(), ret.begin(), ret.end());
      returns = ToDevice(ret, at::kFloat, device);
      flops += RowFlops(critic_->config(), row, 0, false, critic_->lora_rank());
    } else if (objective == Objective::kPpo) {
      RowTargets(rt.sample, rt.begin, rt.end, batch, nullptr, &adv, &ret);
    }
    if (objective == Objective::kPpo) {
      if (normalize) {
        for (float& a : adv) a = static_cast<float>((a - adv_mean) / adv_std);
      }
      advantages = ToDevice(adv, at::kFloat, device);
    }

    // 5. Policy: log-probs of the model tokens, computed in chunks over the
    //    vocabulary (no [M, V] tensor beyond ModelOptions::keep_logits_bytes).
    at::Tensor logp, entropy;
    if (train_actor) {
      at::Tensor hidden = policy_->Hidden(ids, row.lengths)[0].index_select(0, state);  // [M,H]
      logp = policy_->TokenLogprobs(hidden, target, options_.temperature);               // [M]
      if (objective == Objective::kPpo && options_.entropy_coef > 0) {  // The bonus needs its gradient.
        entropy = (w * policy_->TokenEntropy(hidden, options_.temperature, /*with_grad=*/true)).sum();
        m["entropy"] += entropy.item<double>();
      } else if (options_.entropy_metric) {
        m["entropy"] += (w * policy_->TokenEntropy(hidden, options_.temperature)).sum().item<double>();
      }
      flops += RowFlops(policy_->config(), row, static_cast<int64_t>(rt.state.size()), true, policy_->lora_rank());
    }

    // 6. Losses, each a weighted sum over this row's model tokens.
    at::Tensor loss;
    if (objective == Objective::kPpo) {
      const at::Tensor sequence = ToDevice(SegmentIndex(rt), at::kLong, device);  // [M]
      PolicyLoss pl = PpoPolicyLoss({logp, rollout_logp, advantages, w, sequence}, options_.policy_loss);
      loss = pl.loss;
      if (use_critic) {
        at::Tensor vl = ValueLoss(values, returns, w);
        loss = loss + vl;
        m["value_loss"] += vl.item<double>();
      }
      if (entropy.defined()) loss = loss - options_.entropy_coef * entropy;
      if (kl_ref) {
        at::Tensor ref_logp;
        {
          at::NoGradGuard no_grad;
          at::Tensor h = ref_policy_->Hidden(ids, row.lengths)[0].index_select(0, state);
          ref_logp = ref_policy_->TokenLogprobs(h, target, options_.temperature);
        }
        const at::Tensor kl = KlRefPenalty(ref_logp, logp, w);
        loss = loss + options_.kl_ref_coef * kl;
        m["kl_ref"] += kl.item<double>();
      }
      m["policy_loss"] += pl.loss.item<double>();
      m["clip_frac"] += pl.stats.clipped;
      m["dual_clip_frac"] += pl.stats.dual_clipped;
      m["mask_frac"] += pl.stats.masked;
      m["is_weight_mean"] += pl.stats.is_weight;
      m["logp_abs_diff"] += pl.stats.abs_logp_diff;
      m["kl_rollout"] += pl.stats.kl;
      is_max = std::max(is_max, pl.stats.is_weight_max);
      is_min = std::min(is_min, pl.stats.is_weight_min);
      m["advantage_mean"] += (w * advantages).sum().item<double>();
    } else if (objective == Objective::kSft) {
      loss = SftLoss(logp, w);
      m["sft_loss"] += loss.item<double>();
    } else {
      loss = ValueLoss(values, returns, w);
      m["value_loss"] += loss.item<double>();
    }

    // 7. Backward: gradients accumulate over rows; this row's activations go.
    loss.backward();
  }

  // 8. Data-parallel: sum gradients over ranks (loss weights already use the global N).
  for (AdamW* opt : {train_actor ? actor_opt_.get() : nullptr, use_critic ? critic_opt_.get() : nullptr}) {
    if (opt == nullptr || opt->sharded() || (collectives_ == nullptr && !grad_observer_)) continue;
    std::vector<at::Tensor> grads;
    for (at::Tensor& p : opt->params()) {
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
      grads.push_back(p.grad());
    }
    if (collectives_ != nullptr) {
      if (auto s = collectives_->AllReduceSum(grads); !s.ok()) return s;
    }
    if (grad_observer_) grad_observer_(opt == actor_opt_.get() ? "actor" : "critic", grads);
  }

  // 9. Clip and step: one AdamW update per model, at the scheduled learning rate.
  if (train_actor) {
    m["actor_lr"] = actor_opt_->lr() * actor_opt_->ScheduleFactor();
    m["actor_grad_norm"] = actor_opt_->Step();
  }
  if (use_critic) {
    m["critic_lr"] = critic_opt_->lr() * critic_opt_->ScheduleFactor();
    m["critic_grad_norm"] = critic_opt_->Step();
  }

  // 10. Batch metrics: sums and maxima over this rank's trajectories and
  //     tokens, reduced over ranks, then the global batch's figures.
  double r_max = -HUGE_VAL, r_min = HUGE_VAL;
  for (const Sample& s : batch) {
    m["reward_sum"] += s.reward, m["reward_sq"] += s.reward * s.reward;
    r_min = std::min(r_min, s.reward), r_max = std::max(r_max, s.reward);
    m["reward_positive"] += s.reward > 0, m["length_clipped"] += s.length_clipped;
  }
  for (size_t i = 0; i < all_values.size(); ++i) {
    const double d = all_returns[i] - all_values[i], d95 = all_gae95[i] - all_values[i];
    m["ev_tokens"] += 1, m["ev_target_sum"] += all_returns[i];
    m["ev_target_sq_sum"] += all_returns[i] * all_returns[i];
    m["ev_residual_sum"] += d, m["ev_residual_sq_sum"] += d * d;
    m["ev95_r"] += all_gae95[i], m["ev95_r2"] += all_gae95[i] * all_gae95[i];
    m["ev95_d"] += d95, m["ev95_d2"] += d95 * d95;
  }
  if (!use_critic) {
    for (const char* k : kExplainedVarianceSums) m.erase(k);
    for (const char* k : {"ev95_r", "ev95_r2", "ev95_d", "ev95_d2"}) m.erase(k);
  }
  m["trajectories"] = static_cast<double>(batch.size());
  m["tokens"] = static_cast<double>(tokens);
  m["model_tokens"] = static_cast<double>(model_tokens);
  m["rows"] = static_cast<double>(rows.size());
  m["train_flops"] = flops;
  m["reward_max"] = r_max, m["-reward_min"] = -r_min;
  m["is_weight_max"] = is_max, m["-is_weight_min"] = -is_min;
  m["step_seconds"] = Seconds(start);
  if (collectives_ != nullptr) {
    if (auto s = ReduceMetrics(*collectives_, device, &m); !s.ok()) return s;
    if (!use_critic) {
      for (const char* k : kExplainedVarianceSums) m.erase(k);
    }
    if (!kl_ref) m.erase("kl_ref");  // The reduction wrote every summed key.
  }
  return m;
}

}  // namespace kernelrl::learner::rl
