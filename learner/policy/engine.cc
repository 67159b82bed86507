#include "common/clock.h"
#include "learner/policy/engine.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <ctime>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "learner/model.h"

namespace kernelrl::learner {
namespace {


bool EndsWith(const std::vector<int32_t>& out, const std::vector<int32_t>& stop) {
  return !stop.empty() && out.size() >= stop.size() && std::equal(stop.rbegin(), stop.rend(), out.rbegin());
}

}  // namespace

struct PolicyEngine::Pending {
  GenerationRequest request;
  absl::StatusOr<GenerationResult> result;
  absl::Notification done;
};

struct PolicyEngine::Slot {
  std::shared_ptr<Pending> pending;  // Null when the slot is free.
  GenerationResult result;
  int64_t len = 0;      // Positions whose keys/values are in the cache.
  int32_t last = 0;     // Last sampled token (input of the next decode step).
  int32_t max_new = 0;
  std::mt19937_64 rng;
};

PolicyEngine::PolicyEngine(std::unique_ptr<Transformer> model, int64_t policy_version, std::string checkpoint_path,
                           EngineOptions options)
    : options_(std::move(options)), model_(std::move(model)) {
  device_ = model_->options().device.str();
  dtype_ = model_->options().dtype == at::kFloat ? "float32" : "bfloat16";
  version_ = policy_version;
  checkpoint_path_ = std::move(checkpoint_path);
  loaded_at_ = NowRfc3339();
  seed_counter_ = std::random_device{}();
  for (int i = 0; i < options_.max_batch; ++i) slots_.push_back(std::make_unique<Slot>());
  thread_ = std::thread([this] { Loop(); });
}

static absl::StatusOr<std::unique_ptr<Transformer>> LoadPolicyModel(const std::string& path, const std::string& device,
                                                             const std::string& dtype) {
  ModelOptions options;
  if (device == "cpu") {
    options.device = at::kCPU;
  } else if (absl::StartsWith(device, "cuda")) {
    try {
      options.device = at::Device(device);
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("device \"", device, "\": ", e.what()));
    }
    options.dtype = at::kBFloat16;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("device \"", device, "\": use cpu or cuda[:N]"));
  }
  if (dtype == "float32") {
    options.dtype = at::kFloat;
  } else if (dtype == "bfloat16") {
    if (options.device.is_cpu()) return absl::InvalidArgumentError("bfloat16 needs a CUDA device");
    options.dtype = at::kBFloat16;
  } else if (!dtype.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("dtype \"", dtype, "\": use float32 or bfloat16"));
  }
  return Transformer::Load(path, Head::kLanguageModel, options);
}

absl::StatusOr<std::unique_ptr<PolicyEngine>> PolicyEngine::Load(const std::string& model_path,
                                                                 const std::string& device, const std::string& dtype,
                                                                 int64_t policy_version, EngineOptions options) {
  auto model = LoadPolicyModel(model_path, device, dtype);
  if (!model.ok()) return model.status();
  auto engine = std::make_unique<PolicyEngine>(std::move(*model), policy_version, model_path, std::move(options));
  return engine;
}

absl::Status PolicyEngine::SwapWeightsFrom(const std::string& checkpoint_path, int64_t policy_version) {
  auto model = LoadPolicyModel(checkpoint_path, device_, dtype_);
  if (!model.ok()) return model.status();
  SwapWeights(std::move(*model), policy_version, checkpoint_path);
  return absl::OkStatus();
}

PolicyEngine::~PolicyEngine() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    work_.SignalAll();
  }
  thread_.join();
}

absl::StatusOr<GenerationResult> PolicyEngine::Generate(GenerationRequest request) {
  auto p = std::make_shared<Pending>();
  p->request = std::move(request);
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return absl::UnavailableError("policy engine is shutting down");
    if (p->request.sampling.seed == 0) p->request.sampling.seed = ++seed_counter_ * 0x9E3779B97F4A7C15ULL;
    queue_.push_back(p);
    work_.Signal();
  }
  p->done.WaitForNotification();
  return std::move(p->result);
}

void PolicyEngine::SwapWeights(std::unique_ptr<Transformer> model, int64_t policy_version,
                               std::string checkpoint_path) {
  absl::MutexLock lock(&mu_);
  next_model_ = std::move(model);  // A newer queued swap replaces an older one.
  next_version_ = policy_version;
  next_path_ = std::move(checkpoint_path);
  work_.Signal();
}

PolicyEngine::Info PolicyEngine::GetInfo() const {
  absl::MutexLock lock(&mu_);
  return Info{version_, checkpoint_path_, loaded_at_, completed_, tokens_, active_,
              static_cast<int>(queue_.size()), next_model_ != nullptr};
}

void PolicyEngine::ApplySwap() {
  model_ = std::move(next_model_);
  cache_.reset();  // Rebuilt for the new model's shape on first use.
  version_ = next_version_;
  checkpoint_path_ = next_path_;
  loaded_at_ = NowRfc3339();
}

void PolicyEngine::Loop() {
  c10::InferenceMode inference;
  while (true) {
    std::vector<std::shared_ptr<Pending>> admit;
    {
      absl::MutexLock lock(&mu_);
      while (!stop_ && queue_.empty() && active_ == 0 && next_model_ == nullptr) work_.Wait(&mu_);
      if (stop_) break;
      if (next_model_ != nullptr && active_ == 0) ApplySwap();
      if (next_model_ == nullptr) {
        while (active_ + static_cast<int>(admit.size()) < options_.max_batch && !queue_.empty()) {
          admit.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        active_ += static_cast<int>(admit.size());
      }
    }
    if (!admit.empty()) Admit(std::move(admit));
    bool any = std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->pending != nullptr; });
    if (any) DecodeStep();
  }
  // Shutdown: fail everything still queued or running.
  absl::MutexLock lock(&mu_);
  for (auto& s : slots_) {
    if (s->pending) {
      s->pending->result = absl::UnavailableError("policy engine shut down during generation");
      s->pending->done.Notify();
      s->pending.reset();
    }
  }
  for (auto& p : queue_) {
    p->result = absl::UnavailableError("policy engine shut down");
    p->done.Notify();
  }
  queue_.clear();
}

void PolicyEngine::Admit(std::vector<std::shared_ptr<Pending>> batch) {
  const ModelConfig& cfg = model_->config();
  if (cache_ == nullptr) {
    cache_ = std::make_unique<KVCache>(cfg, options_.max_batch, options_.max_seq_len,
                                       at::TensorOptions().device(model_->options().device).dtype(model_->options().dtype));
    eos_ids_ = options_.eos_ids;
    if (eos_ids_.empty()) {
      for (int64_t e : cfg.eos_token_ids) eos_ids_.push_back(static_cast<int32_t>(e));
    }
  }
  int64_t version;
  {
    absl::MutexLock lock(&mu_);
    version = version_;
  }
  std::vector<int> placed;
  for (auto& p : batch) {
    const auto& prompt = p->request.prompt;
    absl::Status bad;
    if (prompt.empty()) bad = absl::InvalidArgumentError("empty prompt");
    if (static_cast<int64_t>(prompt.size()) >= options_.max_seq_len) {
      bad = absl::InvalidArgumentError(absl::StrCat("prompt of ", prompt.size(), " tokens leaves no room in the ",
                                                    options_.max_seq_len, "-token context"));
    }
    for (int32_t id : prompt) {
      if (id < 0 || id >= cfg.vocab_size) {
        bad = absl::InvalidArgumentError(absl::StrCat("token id ", id, " outside the vocabulary [0, ", cfg.vocab_size, ")"));
        break;
      }
    }
    const auto& sp = p->request.sampling;
    if (sp.temperature < 0 || sp.top_p < 0 || sp.max_new_tokens < 0) {
      bad = absl::InvalidArgumentError("temperature, top_p and max_new_tokens must be >= 0");
    }
    if (!bad.ok()) {
      p->result = bad;
      p->done.Notify();
      absl::MutexLock lock(&mu_);
      --active_;
      continue;
    }
    int s = 0;
    while (slots_[s]->pending != nullptr) ++s;  // A free slot exists: admission respects max_batch.
    Slot& slot = *slots_[s];
    slot.pending = p;
    slot.result = GenerationResult();
    slot.result.policy_version = version;
    slot.len = static_cast<int64_t>(prompt.size());
    const int64_t room = options_.max_seq_len - slot.len;
    slot.max_new = static_cast<int32_t>(sp.max_new_tokens > 0 ? std::min<int64_t>(sp.max_new_tokens, room) : room);
    slot.rng.seed(sp.seed);
    placed.push_back(s);
  }
  // Batched prefill, right-padded, in chunks bounded by max_prefill_tokens.
  const at::Device device = model_->options().device;
  size_t i = 0;
  while (i < placed.size()) {
    size_t j = i;
    int64_t longest = 0;
    while (j < placed.size()) {
      const int64_t len = slots_[placed[j]]->len;
      if (j > i && std::max(longest, len) * static_cast<int64_t>(j - i + 1) > options_.max_prefill_tokens) break;
      longest = std::max(longest, len);
      ++j;
    }
    const int64_t n = static_cast<int64_t>(j - i);
    std::vector<int64_t> ids(n * longest, 0), rows, last;
    for (int64_t r = 0; r < n; ++r) {
      const Slot& slot = *slots_[placed[i + r]];
      std::copy(slot.pending->request.prompt.begin(), slot.pending->request.prompt.end(), ids.begin() + r * longest);
      rows.push_back(placed[i + r]);
      last.push_back(slot.len - 1);
    }
    at::Tensor ids_t = at::tensor(ids, at::kLong).view({n, longest}).to(device);
    at::Tensor slots_t = at::tensor(rows, at::kLong).to(device);
    at::Tensor hidden = model_->Prefill(ids_t, slots_t, cache_.get());  // [n, P, H]
    at::Tensor last_t = at::tensor(last, at::kLong).to(device);
    at::Tensor final = hidden.index({at::arange(n, at::TensorOptions().dtype(at::kLong).device(device)), last_t});
    SampleRows(model_->HeadLogits(final), std::vector<int>(placed.begin() + i, placed.begin() + j));
    i = j;
  }
}

void PolicyEngine::DecodeStep() {
  std::vector<int> active;
  std::vector<int64_t> ids, rows, positions;
  for (int s = 0; s < static_cast<int>(slots_.size()); ++s) {
    Slot& slot = *slots_[s];
    if (slot.pending == nullptr) continue;
    active.push_back(s);
    ids.push_back(slot.last);
    rows.push_back(s);
    positions.push_back(slot.len);
  }
  at::Tensor logits = model_->Decode(ids, rows, positions, cache_.get());
  for (int s : active) ++slots_[s]->len;
  SampleRows(logits, active);
}

void PolicyEngine::SampleRows(const at::Tensor& logits, const std::vector<int>& rows) {
  const int64_t n = logits.size(0);
  const at::Device device = logits.device();
  std::vector<float> inv_temp(n), top_p(n), u(n);
  std::vector<uint8_t> greedy(n);
  bool any_top_p = false, any_sampled = false;
  for (int64_t r = 0; r < n; ++r) {
    const SamplingOptions& sp = slots_[rows[r]]->pending->request.sampling;
    greedy[r] = sp.temperature <= 0;
    any_sampled |= !greedy[r];
    inv_temp[r] = greedy[r] ? 1.0f : 1.0f / sp.temperature;
    const bool cut = !greedy[r] && sp.top_p > 0 && sp.top_p < 1;
    top_p[r] = cut ? sp.top_p : 2.0f;
    any_top_p |= cut;
    u[r] = static_cast<float>(std::uniform_real_distribution<double>(0.0, 1.0)(slots_[rows[r]]->rng));
  }
  auto opts = at::TensorOptions().device(device);
  at::Tensor scaled = logits * at::tensor(inv_temp, at::kFloat).to(device).unsqueeze(1);
  at::Tensor logp = at::log_softmax(scaled, -1);  // [n, V]
  at::Tensor token = logits.argmax(-1);           // Greedy choice.
  if (any_sampled) {
    // Inverse-CDF sampling with one uniform per row from the request's own
    // generator: reproducible per request whatever the batch holds.
    at::Tensor probs = logp.exp();
    at::Tensor order;
    if (any_top_p) {
      auto sorted = probs.sort(-1, /*descending=*/true);
      probs = std::get<0>(sorted);
      order = std::get<1>(sorted);
      at::Tensor keep = (probs.cumsum(-1) - probs).lt(at::tensor(top_p, at::kFloat).to(device).unsqueeze(1));
      probs = probs * keep;
    }
    at::Tensor cdf = probs.cumsum(-1);
    at::Tensor target = cdf.select(1, cdf.size(1) - 1) * at::tensor(u, at::kFloat).to(device);
    at::Tensor pick = at::searchsorted(cdf, target.unsqueeze(1)).clamp_max(cdf.size(1) - 1);  // [n,1]
    at::Tensor sampled = any_top_p ? order.gather(1, pick).squeeze(1) : pick.squeeze(1);
    at::Tensor is_greedy = at::tensor(std::vector<int64_t>(greedy.begin(), greedy.end()), at::kLong).to(device).gt(0);
    token = at::where(is_greedy, token, sampled);
  }
  at::Tensor lp = logp.gather(1, token.unsqueeze(1)).squeeze(1);
  // The one device sync per step.
  at::Tensor both = at::stack({token.to(at::kDouble), lp.to(at::kDouble)}).to(at::kCPU).contiguous();
  const double* v = both.data_ptr<double>();
  (void)opts;
  for (int64_t r = 0; r < n; ++r) Accept(rows[r], static_cast<int32_t>(v[r]), static_cast<float>(v[n + r]));
}

void PolicyEngine::Accept(int s, int32_t token, float logprob) {
  Slot& slot = *slots_[s];
  slot.result.output_ids.push_back(token);
  slot.result.logprobs.push_back(logprob);
  slot.last = token;
  const TokenCallback& on_token = slot.pending->request.on_token;
  if (on_token) on_token(token, logprob, slot.result.policy_version);
  if (std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end()) return Finish(s, "eos");
  for (const auto& stop : slot.pending->request.sampling.stop_sequences) {
    if (EndsWith(slot.result.output_ids, stop)) return Finish(s, "stop_sequence");
  }
  if (static_cast<int32_t>(slot.result.output_ids.size()) >= slot.max_new) {
    const bool asked = slot.pending->request.sampling.max_new_tokens > 0 &&
                       static_cast<int32_t>(slot.result.output_ids.size()) >= slot.pending->request.sampling.max_new_tokens;
    return Finish(s, asked ? "max_new_tokens" : "context_length");
  }
  if (slot.len >= options_.max_seq_len) return Finish(s, "context_length");
}

void PolicyEngine::Finish(int s, const std::string& reason) {
  Slot& slot = *slots_[s];
  slot.result.finish_reason = reason;
  std::shared_ptr<Pending> p = std::move(slot.pending);
  slot.pending.reset();
  const int64_t produced = static_cast<int64_t>(slot.result.output_ids.size());
  p->result = std::move(slot.result);
  {
    absl::MutexLock lock(&mu_);
    --active_;
    ++completed_;
    tokens_ += produced;
  }
  p->done.Notify();
}

}  // namespace kernelrl::learner
