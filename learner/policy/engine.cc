#include "common/clock.h"
#include "common/gpu_lease.h"
#include "common/log.h"
#include "learner/policy/engine.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/InferenceMode.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <ctime>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "learner/model.h"
#include "learner/policy/decode_graphs.h"
#include "learner/policy/kv_blocks.h"

namespace kernelrl::learner {
namespace {

// splitmix64's finaliser: a 64-bit mix whose outputs pass for independent uniforms.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Tokens of context that key a draw: two, so that "design: strategy=" and "kernel, strategy="
// draw alike at the slot's value.
constexpr size_t kDrawContextTokens = 2;

bool EndsWith(const std::vector<int32_t>& out, const std::vector<int32_t>& stop) {
  return !stop.empty() && out.size() >= stop.size() && std::equal(stop.rbegin(), stop.rend(), out.rbegin());
}

}  // namespace

struct PolicyEngine::Pending {
  GenerationRequest request;
  absl::StatusOr<GenerationResult> result;
  absl::Notification done;
};

struct PolicyEngine::Sequence {
  std::shared_ptr<Pending> pending;
  GenerationResult result;
  // Prompt + output. Positions [0, cached) have keys/values in the cache;
  // the rest are the next forward's input (one token when decoding).
  std::vector<int32_t> tokens;
  int64_t cached = 0;
  std::vector<int32_t> blocks;  // Block table.
  int registered = 0;           // Leading blocks registered in (or taken from) the prefix cache.
  uint64_t key = KVBlockManager::kRootKey;  // The last of those blocks' key.
  int32_t max_new = 0;
  bool finished = false;
  bool prefilling = false;  // Admitted, its first token since admission not yet sampled.
  uint64_t seed = 0;
  absl::flat_hash_map<uint64_t, uint32_t> draws_by_context;  // Draws so far, per context key.

  // The uniform of the next draw, keyed by the seed, the last kDrawContextTokens tokens and how
  // often that context has drawn before in this sequence (so each draw of a sequence has its own
  // key), not by the draw's position: two models sampling with one seed draw the same number
  // wherever their texts end alike, and a paraphrase earlier on does not decouple their later
  // choices (paired evaluations, `kernelrl seeds --rescored`).
  double NextUniform() {
    uint64_t context = 0;
    for (size_t i = tokens.size() - std::min(tokens.size(), kDrawContextTokens); i < tokens.size(); ++i) {
      context = Mix(context ^ static_cast<uint32_t>(tokens[i]));
    }
    const uint32_t before = draws_by_context[context]++;
    const uint64_t bits = Mix(Mix(seed ^ context) + before);
    return static_cast<double>(bits >> 11) * 0x1.0p-53;
  }

  int64_t uncached() const { return static_cast<int64_t>(tokens.size()) - cached; }
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
  // A new thread's current device is cuda:0: streams, graph captures and
  // synchronisations must be on the model's device (cuda:N for replica N).
  thread_ = std::thread([this, device = model_->options().device] {
    const c10::DeviceGuard on_model_device(device);
    Loop();
  });
}

static absl::StatusOr<std::unique_ptr<Transformer>> LoadPolicyModel(const std::string& path, const std::string& device,
                                                                     const std::string& dtype) {
  auto options = ModelOptionsFor(device, dtype);
  if (!options.ok()) return options.status();
  return Transformer::Load(path, Head::kLanguageModel, *options);
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

absl::Status PolicyEngine::SwapWeightsFromModel(const Transformer& model, int64_t policy_version) {
  auto options = ModelOptionsFor(device_, dtype_);
  if (!options.ok()) return options.status();
  auto copy = model.MergedCopy(*options);
  if (!copy.ok()) return copy.status();
  SwapWeights(std::move(*copy), policy_version, absl::StrCat("memory:version-", policy_version));
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
  Info info;
  info.policy_version = version_;
  info.checkpoint_path = checkpoint_path_;
  info.loaded_at = loaded_at_;
  info.requests_completed = completed_;
  info.tokens_generated = tokens_;
  info.active = active_;
  info.queued = static_cast<int>(queue_.size());
  info.swap_pending = next_model_ != nullptr;
  info.running = running_count_;
  info.kv_blocks_total = NumBlocks();
  info.kv_blocks_used = blocks_used_;
  info.kv_blocks_cached = blocks_cached_;
  info.prompt_tokens = published_.prompt_tokens;
  info.prefix_hit_tokens = published_.prefix_hit_tokens;
  info.prefill_tokens = published_.prefill_tokens;
  info.preemptions = published_.preemptions;
  info.gpu_lease_wait_s = published_.gpu_lease_wait_s;
  info.decode_graphs = decode_graphs_;
  return info;
}

int64_t PolicyEngine::NumBlocks() const {
  if (options_.kv_blocks > 0) return options_.kv_blocks;
  const int64_t per_sequence = (options_.max_seq_len + options_.block_size - 1) / options_.block_size;
  return options_.max_batch * per_sequence;
}

void PolicyEngine::ApplySwap() {
  graphs_.reset();  // Captured with the old weights and cache.
  model_ = std::move(next_model_);
  cache_.reset();  // Rebuilt for the new model's shape on first use.
  blocks_.reset();  // Cached prefixes hold the old weights' keys/values.
  version_ = next_version_;
  checkpoint_path_ = next_path_;
  loaded_at_ = NowRfc3339();
}

void PolicyEngine::Loop() {
  c10::InferenceMode inference;
  const GpuLease lease(options_.gpu_lease_path);
  while (true) {
    std::vector<std::shared_ptr<Pending>> intake;
    int64_t version;
    {
      absl::MutexLock lock(&mu_);
      while (!stop_ && queue_.empty() && active_ == 0 && next_model_ == nullptr) work_.Wait(&mu_);
      if (stop_) break;
      if (next_model_ != nullptr && active_ == 0) ApplySwap();
      if (next_model_ == nullptr) {
        intake.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
        queue_.clear();
        active_ += static_cast<int>(intake.size());
      }
      version = version_;
    }
    if (cache_ == nullptr) {
      const ModelConfig& cfg = model_->config();
      // One block more than the manager hands out: the scratch block that
      // padding rows of a fixed-shape (graph) decode step write into.
      cache_ = std::make_unique<PagedKVCache>(
          cfg, NumBlocks() + 1, options_.block_size,
          at::TensorOptions().device(model_->options().device).dtype(model_->options().dtype));
      if (options_.cuda_graphs) {
        const int64_t per_sequence = (options_.max_seq_len + options_.block_size - 1) / options_.block_size;
        graphs_ = std::make_unique<DecodeGraphs>(model_.get(), cache_.get(), NumBlocks(), per_sequence);
      }
      blocks_ = std::make_unique<KVBlockManager>(static_cast<int>(NumBlocks()), options_.block_size,
                                                 options_.prefix_caching);
      eos_ids_ = options_.eos_ids;
      if (eos_ids_.empty()) {
        for (int64_t e : cfg.eos_token_ids) eos_ids_.push_back(static_cast<int32_t>(e));
      }
    }
    if (!intake.empty()) Intake(std::move(intake), version);
    {
      const absl::Time asked = absl::Now();
      absl::StatusOr<GpuLease::Hold> hold = lease.Shared();
      if (!hold.ok()) KLOG(ERROR) << "policy engine: " << hold.status().message() << " (stepping without it)";
      if (lease.enabled()) stats_.gpu_lease_wait_s += absl::ToDoubleSeconds(absl::Now() - asked);
      Admit();
      Prefill();
      RemoveFinished();
      ReserveDecodeBlocks();
      Decode();
      RemoveFinished();
      // The step's kernels (eager and replayed, all on this thread's stream) are done before the
      // lease goes to a timer.
      if (lease.enabled() && model_->options().device.is_cuda()) c10::cuda::getCurrentCUDAStream().synchronize();
    }
    absl::MutexLock lock(&mu_);
    PublishLocked();
  }
  // Shutdown: fail everything still queued, waiting or running.
  absl::MutexLock lock(&mu_);
  auto fail = [](Sequence& s) {
    s.pending->result = absl::UnavailableError("policy engine shut down during generation");
    s.pending->done.Notify();
  };
  for (auto& s : running_) fail(*s);
  for (auto& s : waiting_) fail(*s);
  running_.clear();
  waiting_.clear();
  for (auto& p : queue_) {
    p->result = absl::UnavailableError("policy engine shut down");
    p->done.Notify();
  }
  queue_.clear();
}

void PolicyEngine::Intake(std::vector<std::shared_ptr<Pending>> batch, int64_t version) {
  const ModelConfig& cfg = model_->config();
  for (auto& p : batch) {
    const auto& prompt = p->request.prompt;
    absl::Status bad;
    if (prompt.empty()) bad = absl::InvalidArgumentError("empty prompt");
    if (static_cast<int64_t>(prompt.size()) >= options_.max_seq_len) {
      bad = absl::InvalidArgumentError(absl::StrCat("prompt of ", prompt.size(), " tokens leaves no room in the ",
                                                    options_.max_seq_len, "-token context"));
    } else if (static_cast<int64_t>(prompt.size()) + 1 > NumBlocks() * options_.block_size) {
      bad = absl::ResourceExhaustedError(absl::StrCat("prompt of ", prompt.size(), " tokens does not fit the ",
                                                      NumBlocks() * options_.block_size, "-position KV cache"));
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
    auto s = std::make_unique<Sequence>();
    s->pending = p;
    s->result.policy_version = version;
    s->tokens = prompt;
    const int64_t room = options_.max_seq_len - static_cast<int64_t>(prompt.size());
    s->max_new = static_cast<int32_t>(sp.max_new_tokens > 0 ? std::min<int64_t>(sp.max_new_tokens, room) : room);
    s->seed = sp.seed;
    waiting_.push_back(std::move(s));
  }
}

void PolicyEngine::Admit() {
  const int bs = options_.block_size;
  // Keys of the full prompt blocks that sequences admitted in this
  // iteration will compute: a request whose next block is among them waits
  // one iteration and then shares it instead of computing it again.
  absl::flat_hash_set<uint64_t> computing;
  while (!waiting_.empty() && static_cast<int>(running_.size()) < options_.max_batch) {
    Sequence& s = *waiting_.front();
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    const int full = static_cast<int>((n - 1) / bs);  // Full blocks that may come from the cache.
    uint64_t key;
    std::vector<int> hit = blocks_->Match(s.tokens, full, &key);
    const int matched = static_cast<int>(hit.size());
    if (options_.prefix_caching && matched < full &&
        computing.contains(KVBlockManager::ChainKey(key, absl::MakeConstSpan(s.tokens).subspan(matched * bs, bs)))) {
      for (int b : hit) blocks_->Release(b);
      break;
    }
    const int need = static_cast<int>((n + bs - 1) / bs) - matched;
    // Headroom of one block per running sequence, so that a request just
    // admitted is not preempted again at the next step.
    if (need + static_cast<int>(running_.size()) > blocks_->available()) {
      for (int b : hit) blocks_->Release(b);
      if (!running_.empty()) break;  // Waits for blocks to come free.
      // Alone it still does not fit (a preempted sequence that had grown
      // to the whole cache): the cache is its context.
      std::unique_ptr<Sequence> lone = std::move(waiting_.front());
      waiting_.pop_front();
      Finish(lone.get(), "context_length");
      continue;
    }
    s.blocks.assign(hit.begin(), hit.end());
    for (int i = 0; i < need; ++i) s.blocks.push_back(*blocks_->Allocate());
    s.cached = static_cast<int64_t>(matched) * bs;
    s.registered = matched;
    s.key = key;
    if (options_.prefix_caching) {
      for (int i = matched; i < full; ++i) {
        key = KVBlockManager::ChainKey(key, absl::MakeConstSpan(s.tokens).subspan(i * bs, bs));
        computing.insert(key);
      }
    }
    stats_.prompt_tokens += n;
    stats_.prefix_hit_tokens += s.cached;
    s.prefilling = true;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

void PolicyEngine::Prefill() {
  PagedBatch batch;
  std::vector<int64_t> ids;
  std::vector<Sequence*> seqs, sample;
  int64_t budget = std::max<int64_t>(options_.max_prefill_tokens, 1);
  for (auto& p : running_) {
    Sequence* s = p.get();
    if (s->uncached() <= 1 || budget == 0) continue;  // Decoding (or budget spent).
    const int64_t n = std::min(s->uncached(), budget);
    budget -= n;
    batch.starts.push_back(s->cached);
    batch.lengths.push_back(n);
    batch.block_tables.push_back(s->blocks);
    ids.insert(ids.end(), s->tokens.begin() + s->cached, s->tokens.begin() + s->cached + n);
    seqs.push_back(s);
  }
  if (seqs.empty()) return;
  at::Tensor logits = model_->PagedForward(ids, batch, cache_.get());  // [S,V]
  stats_.prefill_tokens += static_cast<int64_t>(ids.size());
  std::vector<int64_t> rows;
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i]->cached += batch.lengths[i];
    RegisterFullBlocks(seqs[i]);
    if (seqs[i]->uncached() == 0) {  // The whole prompt is in: its last logits sample.
      rows.push_back(static_cast<int64_t>(i));
      sample.push_back(seqs[i]);
    }
  }
  if (sample.empty()) return;
  if (sample.size() != seqs.size()) logits = logits.index_select(0, at::tensor(rows, at::kLong).to(logits.device()));
  SampleRows(logits, sample);
}

void PolicyEngine::ReserveDecodeBlocks() {
  const int64_t bs = options_.block_size;
  for (size_t i = 0; i < running_.size();) {
    Sequence* s = running_[i].get();
    if (s->uncached() != 1 || static_cast<int64_t>(s->blocks.size()) * bs > s->cached) {
      ++i;
      continue;
    }
    std::optional<int> b;
    while (!(b = blocks_->Allocate()) && running_.size() > 1 && i < running_.size() - 1) {
      Preempt(running_.size() - 1);  // The youngest other sequence.
    }
    if (!b && running_.size() > 1) {  // s is the youngest: it yields.
      Preempt(i);
      continue;
    }
    if (!b) {  // Alone and the cache is full: the cache is its context.
      Finish(s, "context_length");
      ++i;
      continue;
    }
    s->blocks.push_back(*b);
    ++i;
  }
}

void PolicyEngine::Preempt(size_t index) {
  std::unique_ptr<Sequence> s = std::move(running_[index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  ReleaseBlocks(s.get());  // Registered ones stay cached: the recomputation may find them.
  s->cached = 0;
  s->registered = 0;
  s->key = KVBlockManager::kRootKey;
  ++stats_.preemptions;
  waiting_.push_front(std::move(s));
}

void PolicyEngine::Decode() {
  std::vector<Sequence*> seqs;
  PagedBatch batch;
  std::vector<int64_t> ids;
  for (auto& p : running_) {
    Sequence* s = p.get();
    if (s->finished || s->uncached() != 1) continue;
    seqs.push_back(s);
    ids.push_back(s->tokens.back());
    batch.starts.push_back(s->cached);
    batch.lengths.push_back(1);
    batch.block_tables.push_back(s->blocks);
  }
  if (seqs.empty()) return;
  std::optional<at::Tensor> graphed;
  if (graphs_ != nullptr) graphed = graphs_->Decode(ids, batch.starts, batch.block_tables);
  at::Tensor logits = graphed ? *graphed : model_->PagedForward(ids, batch, cache_.get());
  for (Sequence* s : seqs) {
    ++s->cached;
    if (s->prefilling) ++stats_.prefill_tokens;  // Its prompt's last token (the rest was cached).
    RegisterFullBlocks(s);
  }
  SampleRows(logits, seqs);
}

void PolicyEngine::RegisterFullBlocks(Sequence* s) {
  if (!options_.prefix_caching) return;
  const int bs = options_.block_size;
  for (; static_cast<int64_t>(s->registered + 1) * bs <= s->cached; ++s->registered) {
    s->key = blocks_->Register(s->blocks[s->registered], s->key,
                               absl::MakeConstSpan(s->tokens).subspan(static_cast<size_t>(s->registered) * bs, bs));
  }
}

void PolicyEngine::ReleaseBlocks(Sequence* s) {
  for (int b : s->blocks) blocks_->Release(b);
  s->blocks.clear();
}

void PolicyEngine::PublishLocked() {
  published_ = stats_;
  running_count_ = static_cast<int>(
      std::count_if(running_.begin(), running_.end(), [](const auto& s) { return !s->finished; }));
  blocks_used_ = blocks_->referenced();
  blocks_cached_ = blocks_->cached();
  decode_graphs_ = graphs_ != nullptr && !graphs_->failed() ? graphs_->captured() : 0;
}

void PolicyEngine::RemoveFinished() {
  running_.erase(std::remove_if(running_.begin(), running_.end(), [](const auto& s) { return s->finished; }),
                 running_.end());
}

void PolicyEngine::SampleRows(const at::Tensor& logits, const std::vector<Sequence*>& rows) {
  const int64_t n = logits.size(0);
  const at::Device device = logits.device();
  std::vector<float> inv_temp(n), top_p(n), u(n);
  std::vector<uint8_t> greedy(n);
  bool any_top_p = false, any_sampled = false;
  for (int64_t r = 0; r < n; ++r) {
    const SamplingOptions& sp = rows[r]->pending->request.sampling;
    greedy[r] = sp.temperature <= 0;
    any_sampled |= !greedy[r];
    inv_temp[r] = greedy[r] ? 1.0f : 1.0f / sp.temperature;
    const bool cut = !greedy[r] && sp.top_p > 0 && sp.top_p < 1;
    top_p[r] = cut ? sp.top_p : 2.0f;
    any_top_p |= cut;
    u[r] = static_cast<float>(rows[r]->NextUniform());
  }
  auto opts = at::TensorOptions().device(device);
  at::Tensor scaled = logits * at::tensor(inv_temp, at::kFloat).to(device).unsqueeze(1);
  at::Tensor logp = at::log_softmax(scaled, -1);  // [n, V]
  at::Tensor token = logits.argmax(-1);           // Greedy choice.
  if (any_sampled) {
    // Inverse-CDF sampling with one uniform per row, keyed by the request's
    // seed and context: reproducible per request whatever the batch holds.
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

void PolicyEngine::Accept(Sequence* s, int32_t token, float logprob) {
  s->prefilling = false;
  s->tokens.push_back(token);
  s->result.output_ids.push_back(token);
  s->result.logprobs.push_back(logprob);
  const TokenCallback& on_token = s->pending->request.on_token;
  if (on_token) on_token(token, logprob, s->result.policy_version);
  if (std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end()) return Finish(s, "eos");
  for (const auto& stop : s->pending->request.sampling.stop_sequences) {
    if (EndsWith(s->result.output_ids, stop)) return Finish(s, "stop_sequence");
  }
  if (static_cast<int32_t>(s->result.output_ids.size()) >= s->max_new) {
    const int32_t asked = s->pending->request.sampling.max_new_tokens;
    const bool by_request = asked > 0 && static_cast<int32_t>(s->result.output_ids.size()) >= asked;
    return Finish(s, by_request ? "max_new_tokens" : "context_length");
  }
}

void PolicyEngine::Finish(Sequence* s, const std::string& reason) {
  s->result.finish_reason = reason;
  s->finished = true;
  ReleaseBlocks(s);
  std::shared_ptr<Pending> p = std::move(s->pending);
  const int64_t produced = static_cast<int64_t>(s->result.output_ids.size());
  p->result = std::move(s->result);
  {
    absl::MutexLock lock(&mu_);
    --active_;
    ++completed_;
    tokens_ += produced;
    PublishLocked();  // A caller reading GetInfo() after its result sees its work counted.
  }
  p->done.Notify();
}

}  // namespace kernelrl::learner
