#include "learner/rl/trainer.h"

#include <algorithm>
#include <chrono>
#include <tuple>

#include <ATen/core/grad_mode.h>
#include <cmath>

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

RowTokens GatherRow(const std::vector<Sample>& batch, const PackedRow& row, double n_global) {
  RowTokens rt;
  int64_t offset = 0;
  for (int i : row.samples) {
    const Sample& s = batch[i];
    const double w = 1.0 / (static_cast<double>(s.model_tokens()) * n_global);
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
double RowFlops(const ModelConfig& c, const PackedRow& row, int64_t head_rows, bool lm_head) {
  const double H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  const double q = c.num_heads * D, kv = c.num_kv_heads * D;
  const double per_layer = H * (q + 2 * kv) + q * H + 3 * H * I;
  double flops = 6.0 * per_layer * c.num_layers * row.tokens;
  for (int64_t n : row.lengths) flops += 6.0 * c.num_layers * q * static_cast<double>(n) * n;  // QK^T and PV, causal
  if (lm_head) flops += 6.0 * H * c.vocab_size * head_rows;
  return flops;
}

// GAE per trajectory segment of a row on the detached values v (outcome
// reward less the sample's baseline on each segment's last token), appended
// to adv and ret.
void RowGae(const RowTokens& rt, const std::vector<Sample>& batch, const float* v, double gamma, double lambda,
            std::vector<float>* adv, std::vector<float>* ret) {
  for (size_t j = 0; j < rt.sample.size(); ++j) {
    std::vector<float> seg(v + rt.begin[j], v + rt.end[j]);
    const Sample& s = batch[rt.sample[j]];
    GaeResult g = Gae(OutcomeRewards(static_cast<int>(seg.size()), s.reward - s.baseline), seg, gamma, lambda);
    adv->insert(adv->end(), g.advantages.begin(), g.advantages.end());
    ret->insert(ret->end(), g.returns.begin(), g.returns.end());
  }
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Metrics that add up over rows and ranks (losses and their statistics are
// already weighted by 1/(T_i N)), and those reduced by maximum ("-x" holds
// -x so that a maximum gives the minimum).
constexpr const char* kSummedMetrics[] = {
    "policy_loss", "value_loss", "sft_loss", "entropy", "clip_frac", "is_weight_mean", "is_truncated_frac",
    "logp_abs_diff", "kl_rollout", "advantage_mean", "trajectories", "tokens", "model_tokens", "rows",
    "train_flops", "reward_sum", "reward_sq", "reward_positive", "length_clipped", "ev_n", "ev_r", "ev_r2",
    "ev_d", "ev_d2"};
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
  if (critic) {  // 1 - Var(returns - values) / Var(returns), over all model tokens.
    const double k = std::max(1.0, m["ev_n"]);
    const double mr = m["ev_r"] / k, md = m["ev_d"] / k;
    const double var_r = m["ev_r2"] / k - mr * mr, var_d = m["ev_d2"] / k - md * md;
    m["explained_variance"] = var_r <= 1e-12 * std::max(1.0, m["ev_r2"] / k) ? 0.0 : 1.0 - var_d / var_r;
  }
  if (ppo) {
    m["is_weight_min"] = -m["-is_weight_min"];
  } else {
    for (const char* k : {"policy_loss", "clip_frac", "is_weight_mean", "is_truncated_frac", "logp_abs_diff",
                          "kl_rollout", "advantage_mean", "is_weight_max"}) {
      m.erase(k);
    }
  }
  if (critic && !ppo) m.erase("entropy");
  if (!critic) m.erase("value_loss");
  if (ppo || critic) m.erase("sft_loss");
  for (const char* k : {"reward_sum", "reward_sq", "reward_positive", "length_clipped", "ev_n", "ev_r", "ev_r2",
                        "ev_d", "ev_d2", "-reward_min", "-is_weight_min"}) {
    m.erase(k);
  }
  m["tokens_per_second"] = m["step_seconds"] > 0 ? m["tokens"] / m["step_seconds"] : 0;
}

}  // namespace

// ---- AdamW ----

AdamW::AdamW(std::vector<at::Tensor> params, AdamWParams p) : p_(p), params_(std::move(params)) {
  at::NoGradGuard no_grad;
  separate_master_ = !params_.empty() && params_[0].scalar_type() != at::kFloat;
  for (const at::Tensor& w : params_) {
    master_.push_back(separate_master_ ? w.detach().to(at::kFloat).clone() : w.detach());
    exp_avg_.push_back(at::zeros_like(master_.back()));
    exp_avg_sq_.push_back(at::zeros_like(master_.back()));
    steps_.push_back(at::zeros({}, master_.back().options()));
    decay_.push_back(w.dim() >= 2);
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

double AdamW::Step() {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;  // fp32
  for (at::Tensor& w : params_) {
    grads.push_back(w.grad().defined() ? w.grad().to(at::kFloat) : at::zeros_like(w, at::kFloat));
  }
  const double norm = at::stack(at::_foreach_norm(grads)).norm().item<double>();
  if (p_.max_grad_norm > 0 && norm > p_.max_grad_norm) at::_foreach_mul_(grads, p_.max_grad_norm / (norm + 1e-6));
  at::_foreach_add_(steps_, 1.0);
  for (bool decay : {true, false}) {
    std::vector<at::Tensor> m, g, a, s, st;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (decay_[i] != decay) continue;
      m.push_back(master_[i]), g.push_back(grads[i]), a.push_back(exp_avg_[i]), s.push_back(exp_avg_sq_[i]);
      st.push_back(steps_[i]);
    }
    if (m.empty()) continue;
    at::_fused_adamw_(m, g, a, s, {}, st, p_.lr, p_.beta1, p_.beta2, decay ? p_.weight_decay : 0.0, p_.eps,
                      /*amsgrad=*/false, /*maximize=*/false);
  }
  if (separate_master_) {
    for (size_t i = 0; i < params_.size(); ++i) params_[i].detach().copy_(master_[i]);
  }
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
  return absl::OkStatus();
}

// ---- Trainer ----

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
  auto make = [this](Transformer& model, const AdamWParams& p) {
    return options_.make_optimizer ? options_.make_optimizer(model, p)
                                   : std::make_unique<AdamW>(model.parameters(), p);
  };
  actor_opt_ = make(*policy_, options_.actor);
  if (critic_) critic_opt_ = make(*critic_, options_.critic);
}

absl::StatusOr<StepMetrics> Trainer::PpoStep(const std::vector<Sample>& batch, int64_t global_trajectories) {
  return Step(batch, global_trajectories, Objective::kPpo);
}
absl::StatusOr<StepMetrics> Trainer::SftStep(const std::vector<Sample>& batch, int64_t global_trajectories) {
  return Step(batch, global_trajectories, Objective::kSft);
}
absl::StatusOr<StepMetrics> Trainer::ValueStep(const std::vector<Sample>& batch, int64_t global_trajectories) {
  return Step(batch, global_trajectories, Objective::kValue);
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
  double sum = 0, sq = 0, n = 0;
  auto passes = Passes(rows.size(), false, true, device);
  if (!passes.ok()) return passes.status();
  for (int64_t pass = static_cast<int64_t>(rows.size()); pass < *passes; ++pass) {
    EmptyPass(false, true, device);
  }
  for (const PackedRow& row : rows) {
    const RowTokens rt = GatherRow(batch, row, 1.0);
    const at::Tensor ids = RowIds(batch, row).to(device);
    const at::Tensor state = ToDevice(rt.state, at::kLong, device);
    at::Tensor v_cpu = critic_->Values(critic_->Hidden(ids, row.lengths)[0].index_select(0, state))
                           .to(at::kCPU, at::kFloat)
                           .contiguous();
    std::vector<float> adv, ret;
    RowGae(rt, batch, v_cpu.data_ptr<float>(), options_.gamma, options_.lambda, &adv, &ret);
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

absl::StatusOr<StepMetrics> Trainer::Step(const std::vector<Sample>& batch, int64_t global_trajectories,
                                          Objective objective) {
  const bool train_actor = objective != Objective::kValue;
  const bool use_critic = objective != Objective::kSft;
  const bool data_parallel = collectives_ != nullptr && collectives_->world_size() > 1;
  if (batch.empty() && !data_parallel) return absl::InvalidArgumentError("empty batch");
  if (use_critic && !critic_) return absl::FailedPreconditionError("this step needs a critic");
  const auto start = std::chrono::steady_clock::now();
  const double n_global = global_trajectories > 0 ? global_trajectories : static_cast<double>(batch.size());
  const at::Device device = policy_->options().device;
  const int64_t vocab = policy_->config().vocab_size;
  for (const Sample& s : batch) {
    for (int32_t id : s.ids) {
      if (id < 0 || id >= vocab) return absl::InvalidArgumentError(absl::StrCat(s.id, ": token id ", id, " >= vocab"));
    }
  }
  StepMetrics m;
  std::vector<float> all_values, all_returns;  // For explained variance.
  double flops = 0, is_max = 0, is_min = HUGE_VAL;
  int64_t tokens = 0, model_tokens = 0;

  // 1. Sequence packing: trajectories share rows of <= max_tokens_per_row tokens.
  const std::vector<PackedRow> rows = PackRows(batch, options_.max_tokens_per_row);

  // 1b. PPO with normalised advantages: their mean and standard deviation over
  //     every rank's model tokens first, from a critic pass without gradients
  //     (step 3 recomputes the same values with them).
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
    // 2. The row's model tokens: state positions, targets, rollout log-probs, weights 1/(T_i N).
    const RowTokens rt = GatherRow(batch, row, n_global);
    const at::Tensor ids = RowIds(batch, row).to(device);                        // [1,T]
    const at::Tensor state = ToDevice(rt.state, at::kLong, device);              // [M]
    const at::Tensor target = ToDevice(rt.target, at::kLong, device);            // [M]
    const at::Tensor rollout_logp = ToDevice(rt.rollout_logp, at::kFloat, device);  // [M]
    const at::Tensor weight = ToDevice(rt.weight, at::kFloat, device);           // [M]
    tokens += row.tokens;
    model_tokens += static_cast<int64_t>(rt.state.size());

    // 3. Critic: V(state) per model token (differentiable), then GAE per
    //    trajectory on the detached values: outcome reward on the last token.
    at::Tensor values, advantages, returns;
    if (use_critic) {
      at::Tensor hidden = critic_->Hidden(ids, row.lengths)[0];   // [T,H]
      values = critic_->Values(hidden.index_select(0, state));    // [M]
      at::Tensor v_cpu = values.detach().to(at::kCPU).contiguous();
      const float* v = v_cpu.data_ptr<float>();
      std::vector<float> adv, ret;
      RowGae(rt, batch, v, options_.gamma, options_.lambda, &adv, &ret);
      all_values.insert(all_values.end(), v, v + v_cpu.numel());
      all_returns.insert(all_returns.end(), ret.begin(), ret.end());
      if (normalize) {
        for (float& a : adv) a = static_cast<float>((a - adv_mean) / adv_std);
      }
      advantages = ToDevice(adv, at::kFloat, device);
      returns = ToDevice(ret, at::kFloat, device);
      flops += RowFlops(critic_->config(), row, 0, false);
    }

    // 4. Policy: log-probs of the model tokens, computed in chunks over the
    //    vocabulary (no [M, V] tensor beyond ModelOptions::keep_logits_bytes).
    at::Tensor logp, entropy;
    if (train_actor) {
      at::Tensor hidden = policy_->Hidden(ids, row.lengths)[0].index_select(0, state);  // [M,H]
      logp = policy_->TokenLogprobs(hidden, target, options_.temperature);               // [M]
      if (objective == Objective::kPpo && options_.entropy_coef > 0) {  // The bonus needs its gradient.
        entropy = (weight * policy_->TokenEntropy(hidden, options_.temperature, /*with_grad=*/true)).sum();
        m["entropy"] += entropy.item<double>();
      } else if (options_.entropy_metric) {
        m["entropy"] += (weight * policy_->TokenEntropy(hidden, options_.temperature)).sum().item<double>();
      }
      flops += RowFlops(policy_->config(), row, static_cast<int64_t>(rt.state.size()), true);
    }

    // 5. Losses, each a weighted sum over this row's model tokens.
    at::Tensor loss;
    if (objective == Objective::kPpo) {
      PolicyLoss pl = PpoPolicyLoss({logp, rollout_logp, advantages, weight}, options_.policy_loss);
      at::Tensor vl = ValueLoss(values, returns, weight);
      loss = pl.loss + vl;
      if (entropy.defined()) loss = loss - options_.entropy_coef * entropy;
      m["policy_loss"] += pl.loss.item<double>();
      m["value_loss"] += vl.item<double>();
      m["clip_frac"] += pl.stats.clipped;
      m["is_weight_mean"] += pl.stats.is_weight;
      m["is_truncated_frac"] += pl.stats.truncated;
      m["logp_abs_diff"] += pl.stats.abs_logp_diff;
      m["kl_rollout"] += pl.stats.kl;
      is_max = std::max(is_max, pl.stats.is_weight_max);
      is_min = std::min(is_min, pl.stats.is_weight_min);
      m["advantage_mean"] += (weight * advantages).sum().item<double>();
    } else if (objective == Objective::kSft) {
      loss = SftLoss(logp, weight);
      m["sft_loss"] += loss.item<double>();
    } else {
      loss = ValueLoss(values, returns, weight);
      m["value_loss"] += loss.item<double>();
    }

    // 6. Backward: gradients accumulate over rows; this row's activations go.
    loss.backward();
  }

  // 7. Data-parallel: sum gradients over ranks (loss weights already use the global N).
  for (AdamW* opt : {train_actor ? actor_opt_.get() : nullptr, use_critic ? critic_opt_.get() : nullptr}) {
    if (opt == nullptr || opt->sharded() || (collectives_ == nullptr && !grad_observer_)) continue;
    std::vector<at::Tensor> grads;
    for (at::Tensor& w : opt->params()) {
      if (!w.grad().defined()) w.mutable_grad() = at::zeros_like(w);
      grads.push_back(w.grad());
    }
    if (collectives_ != nullptr) {
      if (auto s = collectives_->AllReduceSum(grads); !s.ok()) return s;
    }
    if (grad_observer_) grad_observer_(opt == actor_opt_.get() ? "actor" : "critic", grads);
  }

  // 8. Clip and step: one AdamW update per model.
  if (train_actor) m["actor_grad_norm"] = actor_opt_->Step();
  if (use_critic) m["critic_grad_norm"] = critic_opt_->Step();

  // 9. Batch metrics: sums and maxima over this rank's trajectories and
  //    tokens, reduced over ranks, then the global batch's figures.
  double r_max = -HUGE_VAL, r_min = HUGE_VAL;
  for (const Sample& s : batch) {
    m["reward_sum"] += s.reward, m["reward_sq"] += s.reward * s.reward;
    r_min = std::min(r_min, s.reward), r_max = std::max(r_max, s.reward);
    m["reward_positive"] += s.reward > 0, m["length_clipped"] += s.length_clipped;
  }
  for (size_t i = 0; i < all_values.size(); ++i) {
    const double d = all_returns[i] - all_values[i];
    m["ev_n"] += 1, m["ev_r"] += all_returns[i], m["ev_r2"] += all_returns[i] * all_returns[i];
    m["ev_d"] += d, m["ev_d2"] += d * d;
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
  }
  FinishMetrics(objective == Objective::kPpo, use_critic, &m);
  return m;
}

}  // namespace kernelrl::learner::rl
