#include "learner/dist/fsdp.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"

namespace kernelrl::learner::dist {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The fields of a unit in declaration order (the flat layout).
std::vector<at::Tensor*> Fields(Transformer::Layer& w) { return w.Fields(); }
std::vector<at::Tensor*> Fields(RootWeights& r) {
  return {&r.embed, &r.final_norm, &r.lm_head, &r.score_w, &r.score_b};
}

ShardedWeights* Get(AutogradContext* ctx) {
  return reinterpret_cast<ShardedWeights*>(ctx->saved_data["weights"].toInt());
}

// The gathered buffers of a unit {trainable, frozen}, the first a
// differentiable function of its master shard: backward reduce-scatters the
// buffer's gradient into the shard's .grad itself (asynchronously), so
// autograd gets no gradient for it.
class GatherUnit : public torch::autograd::Function<GatherUnit> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& shard, ShardedWeights* weights, int64_t unit) {
    (void)shard;
    ctx->saved_data["weights"] = reinterpret_cast<int64_t>(weights);
    ctx->saved_data["unit"] = unit;
    ShardedWeights::Full full = weights->Gather(unit);
    ctx->mark_non_differentiable({full.frozen});
    return {full.train, full.frozen};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    Get(ctx)->ReduceScatter(ctx->saved_data["unit"].toInt(), grad[0]);
    return {at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// A block whose weights are gathered for its forward, dropped, and gathered
// again for the recomputation in backward (activation checkpointing).
class ShardedBlock : public torch::autograd::Function<ShardedBlock> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                            const at::Tensor& shard, ShardedWeights* weights, const Transformer* model, int64_t layer,
                            std::vector<int64_t> lengths) {
    (void)shard;
    ctx->saved_data["weights"] = reinterpret_cast<int64_t>(weights);
    ctx->saved_data["model"] = reinterpret_cast<int64_t>(model);
    ctx->saved_data["layer"] = layer;
    ctx->saved_data["lengths"] = lengths;
    model->SaveBlockInput(ctx, x, cos, sin);
    const ShardedWeights::Full full = weights->Gather(layer + 1);
    weights->Prefetch(layer + 2);
    return model->BlockForward(weights->LayerViews(layer + 1, full), x, cos, sin, nullptr, 0, {}, nullptr, lengths);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    ShardedWeights* weights = Get(ctx);
    const auto* model = reinterpret_cast<const Transformer*>(ctx->saved_data["model"].toInt());
    const int64_t unit = ctx->saved_data["layer"].toInt() + 1;
    auto saved = model->SavedBlockInput(ctx);
    ShardedWeights::Full full = weights->Gather(unit);
    full.train = full.train.detach().requires_grad_(true);
    if (unit > 1) weights->Prefetch(unit - 1);  // The block backward reaches next.
    at::Tensor x = saved[0].detach().requires_grad_(true);
    at::Tensor y;
    {
      at::AutoGradMode grad_on(true);
      y = model->BlockForward(weights->LayerViews(unit, full), x, saved[1], saved[2], nullptr, 0, {}, nullptr,
                              ctx->saved_data["lengths"].toIntVector());
    }
    auto grads = torch::autograd::grad({y}, {x, full.train}, {grad_out[0]}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    weights->ReduceScatter(unit, grads[1]);
    // One per forward input: x, cos, sin, shard, weights, model, layer, lengths.
    return {grads[0], at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

ShardedWeights::ShardedWeights(c10::intrusive_ptr<c10d::Backend> backend, at::Device device, at::ScalarType dtype,
                               Head head, ModelConfig config, ModelOptions options)
    : backend_(std::move(backend)),
      device_(device),
      dtype_(dtype),
      head_(head),
      config_(std::move(config)),
      options_(options) {
  rank_ = backend_->getRank();
  world_ = backend_->getSize();
}

absl::StatusOr<ShardedWeights*> ShardedWeights::Shard(Transformer& model, c10::intrusive_ptr<c10d::Backend> backend,
                                                       at::Device device, at::ScalarType dtype,
                                                       c10::intrusive_ptr<c10d::Backend> replicate) {
  if (model.weight_provider() != nullptr) return absl::FailedPreconditionError("model is already sharded");
  at::NoGradGuard no_grad;
  std::unique_ptr<ShardedWeights> sw(new ShardedWeights(std::move(backend), device, dtype, model.head(),
                                                        model.config(), model.options()));
  sw->tied_ = model.head() == Head::kLanguageModel && model.config().tie_word_embeddings;
  sw->replicate_ = std::move(replicate);
  // With adapters, what is not a parameter() is frozen.
  const bool lora = model.has_adapters();
  std::set<const c10::TensorImpl*> trainable;
  if (lora) {
    for (const at::Tensor& p : model.parameters()) trainable.insert(p.unsafeGetTensorImpl());
    sw->lora_rank_ = model.lora_rank();
    sw->lora_alpha_ = model.lora_scale() * static_cast<double>(sw->lora_rank_);
  }
  try {
    RootWeights root = model.root_weights();
    if (sw->tied_) root.lm_head = at::Tensor();  // The embedding is the head.
    std::vector<std::vector<at::Tensor*>> fields = {Fields(root)};
    std::vector<Transformer::Layer> layers = model.layers();
    for (Transformer::Layer& w : layers) fields.push_back(Fields(w));
    for (size_t unit = 0; unit < fields.size(); ++unit) {
      Unit u;
      std::vector<at::Tensor> flat, frozen_flat;
      std::vector<std::pair<int64_t, int64_t>> decay, head;  // Unit coordinates.
      for (size_t f = 0; f < fields[unit].size(); ++f) {
        const at::Tensor* t = fields[unit][f];
        // Root fields (Fields(RootWeights&)): 0 the embedding, 3-4 the value head.
        const bool embedding = unit == 0 && f == 0, value_head = unit == 0 && f >= 3;
        Entry e;
        e.present = t->defined();
        e.frozen = e.present && lora && !trainable.count(t->unsafeGetTensorImpl());
        if (e.frozen) {
          e.shape = t->sizes().vec();
          e.offset = u.frozen_numel;
          e.numel = t->numel();
          u.frozen_numel += e.numel;
          frozen_flat.push_back(t->detach().reshape({-1}).to(dtype));
        } else if (e.present) {
          e.shape = t->sizes().vec();
          e.offset = u.numel;
          e.numel = t->numel();
          u.numel += e.numel;
          flat.push_back(t->detach().reshape({-1}).to(at::kFloat));  // Cut where the model lives.
          if (t->dim() >= 2 && !embedding && !value_head) decay.emplace_back(e.offset, e.offset + e.numel);
          if (value_head) head.emplace_back(e.offset, e.offset + e.numel);
        }
        u.entries.push_back(e);
      }
      // This rank's part of a flat buffer, padded to a multiple of the world.
      auto cut = [&](const std::vector<at::Tensor>& parts, int64_t numel, int64_t* padded, at::ScalarType type) {
        const int64_t shard = (numel + sw->world_ - 1) / sw->world_;
        *padded = shard * sw->world_;
        if (parts.empty()) return at::empty({0}, at::TensorOptions().device(device).dtype(type));
        at::Tensor all = at::constant_pad_nd(at::cat(parts), {0, *padded - numel});
        return all.narrow(0, shard * sw->rank_, shard).to(device).clone();
      };
      sw->shards_.push_back(cut(flat, u.numel, &u.padded, at::kFloat).requires_grad_(true));
      sw->frozen_shards_.push_back(cut(frozen_flat, u.frozen_numel, &u.frozen_padded, dtype));
      const int64_t shard = u.padded / sw->world_, begin = shard * sw->rank_;
      auto local = [&](const std::vector<std::pair<int64_t, int64_t>>& ranges) {  // Shard coordinates.
        std::vector<std::pair<int64_t, int64_t>> out;
        for (auto [a, b] : ranges) {
          const int64_t lo = std::max(a, begin), hi = std::min(b, begin + shard);
          if (lo < hi) out.emplace_back(lo - begin, hi - begin);
        }
        return out;
      };
      sw->decay_ranges_.push_back(local(decay));
      sw->head_ranges_.push_back(local(head));
      sw->units_.push_back(std::move(u));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("sharding the model: ", e.what()));
  }
  sw->gathers_.resize(sw->units_.size());
  ShardedWeights* out = sw.get();
  model.SetWeightProvider(std::move(sw), device, dtype);
  return out;
}

absl::Status ShardedWeights::SetValueHead(const at::Tensor& weight, const at::Tensor& bias) {
  if (head_ != Head::kValue) return absl::FailedPreconditionError("not a value model");
  const Unit& root = units_[0];
  const int64_t shard = root.padded / world_, begin = shard * rank_;
  at::NoGradGuard no_grad;
  const at::Tensor values[2] = {weight, bias};
  for (int k = 0; k < 2; ++k) {
    const Entry& e = root.entries[3 + k];  // Fields(RootWeights&): 3-4 the value head.
    if (k == 1 && !e.present) continue;      // A head without a bias.
    if (!e.present || e.frozen || values[k].numel() != e.numel) {
      return absl::InvalidArgumentError(absl::StrCat("value head field ", k, ": ", values[k].numel(), " values for ",
                                                     e.numel, " weights"));
    }
    const at::Tensor flat = values[k].detach().reshape({-1}).to(at::kCPU, at::kFloat);
    const int64_t lo = std::max(e.offset, begin), hi = std::min(e.offset + e.numel, begin + shard);
    if (lo < hi) shards_[0].detach().narrow(0, lo - begin, hi - lo).copy_(flat.narrow(0, lo - e.offset, hi - lo));
  }
  return absl::OkStatus();
}

ShardedWeights::Pending ShardedWeights::StartGather(int64_t unit) {
  Pending p;
  p.unit = unit;
  const Unit& u = units_[unit];
  const at::TensorOptions options = at::TensorOptions().device(device_).dtype(dtype_);
  p.out = at::empty({u.padded}, options);  // [P]
  if (u.padded > 0) {
    p.in = shards_[unit].detach().to(dtype_, /*non_blocking=*/false, /*copy=*/true);  // [P/W]
    p.work = backend_->_allgather_base(p.out, p.in);
  }
  p.frozen_out = at::empty({u.frozen_padded}, options);
  if (u.frozen_padded > 0) p.frozen_work = backend_->_allgather_base(p.frozen_out, frozen_shards_[unit]);
  return p;
}

void ShardedWeights::Prefetch(int64_t unit) {
  if (unit < 0 || unit >= unit_count() || gathers_[unit].unit >= 0) return;
  gathers_[unit] = StartGather(unit);
}

ShardedWeights::Full ShardedWeights::Gather(int64_t unit) {
  Pending p = gathers_[unit].unit >= 0 ? std::move(gathers_[unit]) : StartGather(unit);
  gathers_[unit] = Pending();
  if (p.work) p.work->wait();
  if (p.frozen_work) p.frozen_work->wait();
  return {p.out, p.frozen_out};
}

void ShardedWeights::ReduceScatter(int64_t unit, const at::Tensor& grad_full) {
  // One reduce-scatter in flight: the previous one is added into .grad
  // now, while this one overlaps the next block's backward.
  while (!reduce_scatters_.empty()) {
    FinishReduceScatter(reduce_scatters_.front());
    reduce_scatters_.pop_front();
  }
  if (units_[unit].padded == 0) return;  // Nothing trainable in it (every rank alike).
  Pending p;
  p.unit = unit;
  // Summed in fp32: the sum of W ranks' bf16 gradients rounds once.
  p.in = grad_full.defined() ? grad_full.detach().to(at::kFloat).contiguous()
                             : at::zeros({units_[unit].padded}, shards_[unit].options());
  p.out = at::empty({units_[unit].padded / world_}, shards_[unit].options());
  c10d::ReduceScatterOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  p.work = backend_->_reduce_scatter_base(p.out, p.in, o);
  reduce_scatters_.push_back(std::move(p));
}

void ShardedWeights::FinishReduceScatter(Pending& p) {
  at::NoGradGuard no_grad;
  p.work->wait();
  if (replicate_) {  // Hybrid: the same shard's gradients of the other hosts.
    std::vector<at::Tensor> v = {p.out};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    replicate_->allreduce(v, o)->wait();
  }
  at::Tensor& g = shards_[p.unit].mutable_grad();
  if (g.defined()) {
    g.add_(p.out);
  } else {
    g = p.out;
  }
}

void ShardedWeights::FinishGradients() {
  for (Pending& p : reduce_scatters_) FinishReduceScatter(p);
  reduce_scatters_.clear();
  for (Pending& p : gathers_) {
    if (p.work) p.work->wait();
    if (p.frozen_work) p.frozen_work->wait();
    p = Pending();
  }
}

void ShardedWeights::AllReduceSum(at::Tensor& t) {
  std::vector<at::Tensor> v = {t};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  backend_->allreduce(v, o)->wait();
}

Transformer::Layer ShardedWeights::LayerViews(int64_t unit, const Full& full) const {
  Transformer::Layer w;
  std::vector<at::Tensor*> f = Fields(w);
  const Unit& u = units_[unit];
  for (size_t i = 0; i < f.size(); ++i) {
    const Entry& e = u.entries[i];
    if (e.present) *f[i] = (e.frozen ? full.frozen : full.train).narrow(0, e.offset, e.numel).view(e.shape);
  }
  return w;
}

RootWeights ShardedWeights::RootViews(const Full& full) const {
  RootWeights r;
  std::vector<at::Tensor*> f = Fields(r);
  const Unit& u = units_[0];
  for (size_t i = 0; i < f.size(); ++i) {
    const Entry& e = u.entries[i];
    if (e.present) *f[i] = (e.frozen ? full.frozen : full.train).narrow(0, e.offset, e.numel).view(e.shape);
  }
  if (tied_) r.lm_head = r.embed;
  return r;
}

RootWeights ShardedWeights::Root() {
  variable_list full = GatherUnit::apply(shards_[0], this, 0);
  return RootViews({full[0], full[1]});
}

at::Tensor ShardedWeights::Block(const Transformer& model, int layer, const at::Tensor& x, const at::Tensor& cos,
                                 const at::Tensor& sin, const std::vector<int64_t>& lengths) {
  const int64_t unit = layer + 1;
  if (model.options().activation_checkpointing && at::GradMode::is_enabled()) {
    return ShardedBlock::apply(x, cos, sin, shards_[unit], this, &model, static_cast<int64_t>(layer), lengths);
  }
  variable_list full = GatherUnit::apply(shards_[unit], this, unit);
  Prefetch(unit + 1);
  return model.BlockForward(LayerViews(unit, {full[0], full[1]}), x, cos, sin, nullptr, 0, {}, nullptr, lengths);
}

Json ShardedWeights::Layout() const {
  Json units = Json::array();
  for (const Unit& u : units_) {
    Json entries = Json::array(), frozen = Json::array();
    for (size_t i = 0; i < u.entries.size(); ++i) {
      const Entry& e = u.entries[i];
      if (!e.present) {
        entries.push_back(Json());
        continue;
      }
      Json shape = Json::array();
      for (int64_t d : e.shape) shape.push_back(Json(d));
      entries.push_back(shape);
      if (e.frozen) frozen.push_back(Json(static_cast<int64_t>(i)));
    }
    Json unit = Json::object({{"numel", Json(u.numel)}, {"padded", Json(u.padded)}, {"entries", entries}});
    if (u.frozen_numel > 0) {  // Entry indices in the frozen buffer, in order.
      unit["frozen"] = frozen;
      unit["frozen_numel"] = Json(u.frozen_numel);
      unit["frozen_padded"] = Json(u.frozen_padded);
    }
    units.push_back(unit);
  }
  Json out = Json::object({{"config", config_.ToJson()},
                           {"head", Json(head_ == Head::kValue ? "value" : "language_model")},
                           {"tied", Json(tied_)},
                           {"world_size", Json(world_)},
                           {"units", units}});
  if (lora_rank_ > 0) out["lora"] = Json::object({{"rank", Json(lora_rank_)}, {"alpha", Json(lora_alpha_)}});
  return out;
}

absl::StatusOr<std::unique_ptr<Transformer>> ShardedWeights::Assemble(const Json& layout,
                                                                      const std::vector<at::Tensor>& units,
                                                                      const std::vector<at::Tensor>& frozen,
                                                                      const ModelOptions& model_options) {
  const Json* config_json = FindJson(layout, "config");
  const Json* unit_list = FindJson(layout, "units");
  if (config_json == nullptr || unit_list == nullptr || !unit_list->is_array()) {
    return absl::DataLossError("sharded layout lacks config or units");
  }
  auto config = ModelConfig::FromJson(*config_json);
  if (!config.ok()) return config.status();
  auto head_name = GetJsonString(layout, "head", "");
  auto tied = GetJsonBool(layout, "tied", false);
  if (!head_name.ok()) return head_name.status();
  if (!tied.ok()) return tied.status();
  if (unit_list->size() != units.size() ||
      static_cast<int64_t>(units.size()) != config->num_layers + 1) {
    return absl::DataLossError(absl::StrCat("sharded layout: ", unit_list->size(), " units, ", units.size(),
                                            " buffers, ", config->num_layers, " layers"));
  }
  ModelOptions options = model_options;
  if (const Json* lora = FindJson(layout, "lora"); lora != nullptr) {
    auto alpha = GetJsonDouble(*lora, "alpha", 0);
    if (!alpha.ok()) return alpha.status();
    options.lora_alpha = *alpha;
  }
  // Each field: a view of its unit's buffer (trainable or frozen) at that buffer's running offset.
  auto views = [&frozen](size_t index, const Json& unit, const at::Tensor& full,
                         std::vector<at::Tensor*> fields) -> absl::Status {
    const Json* entries = FindJson(unit, "entries");
    // Layouts written before a model had adapter fields list fewer entries.
    if (entries == nullptr || entries->size() > fields.size()) {
      return absl::DataLossError("sharded layout: unit entries do not match the model's fields");
    }
    std::set<int64_t> frozen_entries;
    if (const Json* f = FindJson(unit, "frozen"); f != nullptr) {
      for (const Json& i : *f) {
        auto v = JsonInt(i);
        if (!v.ok()) return v.status();
        frozen_entries.insert(*v);
      }
      if (index >= frozen.size()) return absl::DataLossError("sharded layout: a frozen part without its buffer");
    }
    int64_t offset = 0, frozen_offset = 0;
    for (size_t i = 0; i < entries->size(); ++i) {
      const Json& e = (*entries)[i];
      if (e.is_null()) continue;
      std::vector<int64_t> shape;
      int64_t numel = 1;
      for (const Json& d : e) {
        auto v = JsonInt(d);
        if (!v.ok()) return v.status();
        shape.push_back(*v);
        numel *= *v;
      }
      const bool is_frozen = frozen_entries.count(static_cast<int64_t>(i)) > 0;
      const at::Tensor& buffer = is_frozen ? frozen[index] : full;
      int64_t& pos = is_frozen ? frozen_offset : offset;
      if (pos + numel > buffer.numel()) return absl::DataLossError("sharded layout: unit buffer too short");
      *fields[i] = buffer.narrow(0, pos, numel).view(shape);
      pos += numel;
    }
    return absl::OkStatus();
  };
  try {
    RootWeights root;
    if (auto s = views(0, (*unit_list)[0], units[0], Fields(root)); !s.ok()) return s;
    std::vector<at::Tensor> fields;
    for (size_t u = 1; u < units.size(); ++u) {
      Transformer::Layer w;
      if (auto s = views(u, (*unit_list)[u], units[u], Fields(w)); !s.ok()) return s;
      for (at::Tensor* t : Fields(w)) fields.push_back(*t);
    }
    return Transformer::FromWeights(*config, *head_name == "value" ? Head::kValue : Head::kLanguageModel, options,
                                    root, fields);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("assembling a sharded model: ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<Transformer>> ShardedWeights::Consolidate(bool keep) const {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> full, frozen;
  // One part of every rank, whole, on the CPU (fp32).
  auto gather = [&](const at::Tensor& shard, int64_t padded) {
    at::Tensor in = shard.detach().clone(), out = at::empty({padded}, shard.options());
    if (padded > 0) backend_->_allgather_base(out, in)->wait();
    return out.to(at::kCPU, at::kFloat);
  };
  try {
    for (size_t u = 0; u < units_.size(); ++u) {
      at::Tensor t = gather(shards_[u], units_[u].padded), f = gather(frozen_shards_[u], units_[u].frozen_padded);
      if (keep) full.push_back(t), frozen.push_back(f);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("consolidating a sharded model: ", e.what()));
  }
  if (!keep) return std::unique_ptr<Transformer>();
  ModelOptions o = options_;
  o.device = at::kCPU;
  o.dtype = at::kFloat;
  return Assemble(Layout(), full, frozen, o);
}

// ---- ShardedAdamW ----

ShardedAdamW::ShardedAdamW(ShardedWeights* weights, rl::AdamWParams p) : rl::AdamW(p), weights_(weights) {
  at::NoGradGuard no_grad;
  params_ = weights->parameters();
  for (const at::Tensor& w : params_) {
    master_.push_back(w.detach());
    const bool offload = p.offload_moments && w.is_cuda();
    const at::TensorOptions moments =
        offload ? w.options().device(at::kCPU).pinned_memory(true).requires_grad(false) : w.options().requires_grad(false);
    exp_avg_.push_back(at::zeros(w.sizes(), moments));
    exp_avg_sq_.push_back(at::zeros(w.sizes(), moments));
    steps_.push_back(at::zeros({}, w.options()));
    decay_.push_back(false);  // Per element: weights->decay_ranges().
  }
}

double ShardedAdamW::Step() {
  weights_->FinishGradients();
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;  // fp32 shards
  for (at::Tensor& w : params_) grads.push_back(w.grad().defined() ? w.grad() : at::zeros_like(w));
  // The global norm: squares summed over every rank's shard (padding is zero).
  at::Tensor sq = at::stack(at::_foreach_norm(grads)).to(at::kDouble).pow(2).sum().reshape({1});
  weights_->AllReduceSum(sq);
  const double norm = std::sqrt(sq.item<double>());
  if (p_.max_grad_norm > 0 && norm > p_.max_grad_norm) at::_foreach_mul_(grads, p_.max_grad_norm / (norm + 1e-6));
  // Decoupled weight decay on the matrices' elements, then the Adam update
  // (AdamW's order: the decay uses the weights before the update).
  const double lr = p_.lr * ScheduleFactor();
  for (size_t u = 0; u < params_.size(); ++u) {
    for (auto [a, b] : weights_->decay_ranges()[u]) master_[u].narrow(0, a, b - a).mul_(1.0 - lr * p_.weight_decay);
  }
  // The head's elements share their shard with others: Adam's step without
  // decay is linear in the learning rate, so their step is scaled after.
  std::vector<std::pair<at::Tensor, at::Tensor>> head_before;  // (slice, its weights before)
  if (p_.head_lr_scale != 1.0) {
    for (size_t u = 0; u < params_.size(); ++u) {
      for (auto [a, b] : weights_->head_ranges()[u]) {
        at::Tensor slice = master_[u].narrow(0, a, b - a);
        head_before.emplace_back(slice, slice.clone());
      }
    }
  }
  at::_foreach_add_(steps_, 1.0);
  if (p_.offload_moments) {
    // Host moments: one unit's at a time on the GPU, copied back on the same
    // stream (the allocator reuses a freed block only after work queued before it).
    for (size_t u = 0; u < params_.size(); ++u) {
      at::Tensor m = exp_avg_[u].to(master_[u].device(), /*non_blocking=*/true);
      at::Tensor v = exp_avg_sq_[u].to(master_[u].device(), /*non_blocking=*/true);
      at::_fused_adamw_({master_[u]}, {grads[u]}, {m}, {v}, {}, {steps_[u]}, lr, p_.beta1, p_.beta2, 0.0, p_.eps,
                        /*amsgrad=*/false, /*maximize=*/false);
      // The last copy blocks: a device-to-host copy waits for the stream, so
      // every host moment is whole when Step() returns.
      const bool last = u + 1 == params_.size();
      exp_avg_[u].copy_(m, /*non_blocking=*/true);
      exp_avg_sq_[u].copy_(v, /*non_blocking=*/!last);
    }
  } else {
    at::_fused_adamw_(master_, grads, exp_avg_, exp_avg_sq_, {}, steps_, lr, p_.beta1, p_.beta2, 0.0, p_.eps,
                      /*amsgrad=*/false, /*maximize=*/false);
  }
  for (auto& [slice, before] : head_before) slice.copy_(before + (slice - before) * p_.head_lr_scale);
  ++step_count_;
  ZeroGrad();
  return norm;
}

std::unique_ptr<rl::AdamW> MakeOptimizer(Transformer& model, const rl::AdamWParams& p) {
  if (auto* sw = dynamic_cast<ShardedWeights*>(model.weight_provider())) return std::make_unique<ShardedAdamW>(sw, p);
  return std::make_unique<rl::AdamW>(model.parameters(), p);
}

absl::Status SetValueHead(Transformer& critic, const at::Tensor& weight, const at::Tensor& bias) {
  if (auto* sw = dynamic_cast<ShardedWeights*>(critic.weight_provider())) return sw->SetValueHead(weight, bias);
  return rl::SetResidentValueHead(critic, weight, bias);
}

void UseShardedModels(rl::TrainerOptions* options) {
  options->make_optimizer = MakeOptimizer;
  options->set_value_head = SetValueHead;
}

}  // namespace kernelrl::learner::dist
