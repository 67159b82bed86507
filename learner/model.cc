#include "learner/model.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file.h"
#include "common/json.h"
#include "learner/fused_ops.h"
#include "learner/paged_decode.h"
#include "learner/safetensors.h"

namespace kernelrl::learner {
namespace {

using at::indexing::Slice;

absl::Status TorchError(absl::string_view what, const std::exception& e) {
  return absl::InternalError(absl::StrCat(what, ": ", e.what()));
}

absl::StatusOr<at::ScalarType> ToScalarType(DType d) {
  switch (d) {
    case DType::kF64: return at::kDouble;
    case DType::kF32: return at::kFloat;
    case DType::kF16: return at::kHalf;
    case DType::kBF16: return at::kBFloat16;
    case DType::kI64: return at::kLong;
    case DType::kI32: return at::kInt;
    case DType::kI16: return at::kShort;
    case DType::kI8: return at::kChar;
    case DType::kU8: return at::kByte;
    case DType::kBool: return at::kBool;
  }
  return absl::InvalidArgumentError("unknown dtype");
}

absl::StatusOr<DType> ToDType(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DType::kF32;
    case at::kBFloat16: return DType::kBF16;
    case at::kHalf: return DType::kF16;
    case at::kDouble: return DType::kF64;
    default: return absl::InvalidArgumentError(absl::StrCat("cannot save dtype ", c10::toString(t)));
  }
}

const char* HFDTypeName(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    default: return "float32";
  }
}

at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return b.defined() ? at::linear(x, w, b) : at::linear(x, w);
}

// A projection with its LoRA adapter (a [r,in], bl [out,r]) when it has one.
// The adapter's product is added into the base output in place, on the 2-D
// output itself rather than a view of it (linear's backward does not need
// its output; an in-place op on a view would make autograd materialise the
// whole output's gradient again): no [tokens, out] temporary either way.
at::Tensor Project(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& a,
                   const at::Tensor& bl, double scale) {
  if (!a.defined()) return Linear(x, w, b);
  const at::Tensor x2 = x.reshape({-1, x.size(-1)});
  at::Tensor y = Linear(x2, w, b);
  y.addmm_(at::linear(x2, a), bl.t(), /*beta=*/1, /*alpha=*/scale);
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = y.size(1);
  return y.view(shape);
}

// The base matrix of each adapted projection and its adapter, per layer.
struct Adapted {
  at::Tensor* w;
  at::Tensor* a;
  at::Tensor* b;
};
std::vector<Adapted> AdaptedProjections(Transformer::Layer& l) {
  return {{&l.qkv_w, &l.qkv_lora_a, &l.qkv_lora_b},
          {&l.o_w, &l.o_lora_a, &l.o_lora_b},
          {&l.gate_up_w, &l.gate_up_lora_a, &l.gate_up_lora_b},
          {&l.down_w, &l.down_lora_a, &l.down_lora_b}};
}

// W + scale B A, computed in fp32 and returned in W's dtype.
at::Tensor Merged(const at::Tensor& w, const at::Tensor& a, const at::Tensor& b, double scale) {
  if (!a.defined()) return w;
  at::NoGradGuard no_grad;
  return (w.detach().to(at::kFloat) + at::mm(b.detach().to(at::kFloat), a.detach().to(at::kFloat)).mul(scale))
      .to(w.scalar_type());
}

// A layer with each adapter folded into its base matrix and dropped.
Transformer::Layer MergedLayer(Transformer::Layer w, double scale) {
  for (const Adapted& p : AdaptedProjections(w)) {
    *p.w = Merged(*p.w, *p.a, *p.b, scale);
    *p.a = at::Tensor();
    *p.b = at::Tensor();
  }
  return w;
}

// alpha / rank, alpha 0 meaning 2 x rank (ModelOptions::lora_alpha).
double LoraScale(double alpha, int64_t rank) { return (alpha > 0 ? alpha : 2.0 * rank) / rank; }

// Random draws for `options`: the device's own generator (a clone, seeded,
// so the global one is left alone) when it draws on a CUDA device, else a
// CPU generator; and the device the draws are made on.
std::pair<at::Generator, at::Device> DrawGenerator(const ModelOptions& options, uint64_t seed) {
  if (!options.draw_on_device || !options.device.is_cuda()) {
    return {at::detail::createCPUGenerator(seed), at::Device(at::kCPU)};
  }
  at::Generator gen = at::globalContext().defaultGenerator(options.device).clone();
  gen.set_current_seed(seed);
  return {gen, options.device};
}

at::Tensor RotateHalf(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// Runs one transformer block forward in no-grad mode and recomputes it in
// backward: only the block's input is kept between the passes. The model
// and its layer must outlive the backward pass (they own the weights).
class CheckpointedBlock : public torch::autograd::Function<CheckpointedBlock> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin, at::TensorList params, const Transformer* model,
                            const Transformer::Layer* layer, std::vector<int64_t> lengths) {
    ctx->saved_data["model"] = reinterpret_cast<int64_t>(model);
    ctx->saved_data["layer"] = reinterpret_cast<int64_t>(layer);
    ctx->saved_data["lengths"] = lengths;
    model->SaveBlockInput(ctx, x, cos, sin);
    return model->BlockForward(*layer, x, cos, sin, nullptr, 0, {}, nullptr, lengths);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto* model = reinterpret_cast<const Transformer*>(ctx->saved_data["model"].toInt());
    const auto* layer = reinterpret_cast<const Transformer::Layer*>(ctx->saved_data["layer"].toInt());
    auto saved = model->SavedBlockInput(ctx);
    at::Tensor x = saved[0].detach().requires_grad_(true);
    Transformer::Layer w = *layer;
    std::vector<at::Tensor> inputs = {x};
    for (at::Tensor* t : w.Fields()) {  // The trainable ones, as Block() passed them; frozen ones stay as they are.
      if (t->defined() && t->requires_grad()) {
        *t = t->detach().requires_grad_(true);
        inputs.push_back(*t);
      }
    }
    at::Tensor y;
    {
      at::AutoGradMode grad_on(true);
      y = model->BlockForward(w, x, saved[1], saved[2], nullptr, 0, {}, nullptr,
                              ctx->saved_data["lengths"].toIntVector());
    }
    auto grads = torch::autograd::grad({y}, inputs, {grad_out[0]});
    // One gradient per input of forward: x, cos, sin, each parameter, model, layer, lengths.
    torch::autograd::variable_list result = {grads[0], at::Tensor(), at::Tensor()};
    result.insert(result.end(), grads.begin() + 1, grads.end());
    result.push_back(at::Tensor());
    result.push_back(at::Tensor());
    result.push_back(at::Tensor());
    return result;
  }
};

// The eager-ATen path of TokenLogprobs (ModelOptions::fused_kernels false;
// the fused one is learner/fused_ops.h).
// log softmax(hidden @ W^T / T)[target], chunked; backward recomputes the
// chunk's logits. Forward values are fp32; in backward the logits stay bf16
// on the GPU (the softmax kernel accumulates in fp32 and the result is cast
// to bf16 for the GEMMs anyway), so each chunk costs a few passes over
// [chunk, V] instead of a dozen in fp32.
class ChunkedTokenLogprobs : public torch::autograd::Function<ChunkedTokenLogprobs> {
 public:
  static constexpr int64_t kChunk = 4096;

  static at::Tensor ChunkLogits(const at::Tensor& h, const at::Tensor& weight, double inv_temp) {
    at::Tensor logits = at::matmul(h, weight.t());
    if (inv_temp != 1.0) logits.mul_(inv_temp);
    return logits;
  }

  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& targets, double inv_temp) {
    const int64_t n = hidden.size(0);
    at::Tensor out = at::empty({n}, hidden.options().dtype(at::kFloat));
    at::Tensor valid = targets.ge(0);
    at::Tensor safe_t = targets.clamp_min(0);
    for (int64_t s = 0; s < n; s += kChunk) {
      const int64_t len = std::min(kChunk, n - s);
      at::Tensor logits = ChunkLogits(hidden.narrow(0, s, len), weight, inv_temp);
      // fp32 values: a bf16 log-prob would be off by ~0.05 (PPO ratios need better).
      at::Tensor logp = at::log_softmax(logits, -1, at::kFloat);
      out.narrow(0, s, len).copy_(logp.gather(1, safe_t.narrow(0, s, len).unsqueeze(1)).squeeze(1));
    }
    out.masked_fill_(valid.logical_not(), 0.0);
    ctx->save_for_backward({hidden, weight, safe_t, valid});
    ctx->saved_data["inv_temp"] = inv_temp;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& hidden = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& targets = saved[2];
    const at::Tensor& valid = saved[3];
    const double inv_temp = ctx->saved_data["inv_temp"].toDouble();
    const bool half = hidden.is_cuda() && hidden.scalar_type() != at::kFloat;
    at::Tensor g = grad_out[0].to(at::kFloat) * valid.to(at::kFloat);  // [N]
    const int64_t n = hidden.size(0);
    at::Tensor grad_h = at::empty_like(hidden);
    const bool weight_grad = ctx->needs_input_grad(1);  // A frozen head (LoRA) takes none.
    at::Tensor grad_w = weight_grad ? at::zeros(weight.sizes(), weight.options().dtype(at::kFloat)) : at::Tensor();
    for (int64_t s = 0; s < n; s += kChunk) {
      const int64_t len = std::min(kChunk, n - s);
      at::Tensor h = hidden.narrow(0, s, len);
      at::Tensor logits = ChunkLogits(h, weight, inv_temp);
      // d logp[t] / d logits = onehot(t) - softmax; times upstream g and 1/T.
      at::Tensor d = half ? at::_softmax(logits, -1, false) : at::_softmax(logits.to(at::kFloat), -1, false);
      at::Tensor gc = g.narrow(0, s, len).unsqueeze(1).to(d.scalar_type());
      d.mul_(gc.neg());
      d.scatter_add_(1, targets.narrow(0, s, len).unsqueeze(1), gc);
      if (inv_temp != 1.0) d.mul_(inv_temp);
      at::Tensor dd = d.to(hidden.scalar_type());
      grad_h.narrow(0, s, len).copy_(at::matmul(dd, weight));
      if (weight_grad) grad_w.add_(at::matmul(dd.t(), h));
    }
    return {grad_h, weight_grad ? grad_w.to(weight.scalar_type()) : at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Per-position entropy H = lse(z) - sum softmax(z) z of z = head(h) / T, in chunks of positions
// (~512 MB of fp32 logits at most); backward recomputes each chunk's logits:
// dH/dz = -p (log p + H).
class ChunkedTokenEntropy : public torch::autograd::Function<ChunkedTokenEntropy> {
 public:
  static int64_t Chunk(const at::Tensor& weight) {
    return std::max<int64_t>(1, (int64_t{128} << 20) / std::max<int64_t>(weight.size(0), 1));
  }
  // fp32 logits, scaled after the cast (a bf16 model's entropy is not rounded twice).
  static at::Tensor Logits(const at::Tensor& h, const at::Tensor& weight, double inv_temp) {
    return at::matmul(h, weight.t()).to(at::kFloat).mul_(inv_temp);
  }

  static at::Tensor Forward(const at::Tensor& hidden, const at::Tensor& weight, double inv_temp) {
    const int64_t n = hidden.size(0), chunk = Chunk(weight);
    at::Tensor out = at::empty({n}, hidden.options().dtype(at::kFloat));
    for (int64_t s = 0; s < n; s += chunk) {
      const int64_t len = std::min(chunk, n - s);
      at::Tensor z = Logits(hidden.narrow(0, s, len), weight, inv_temp);
      at::Tensor lse = z.logsumexp(-1, /*keepdim=*/true);
      out.narrow(0, s, len).copy_(lse.squeeze(-1) - ((z - lse).exp() * z).sum(-1));
    }
    return out;
  }

  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            double inv_temp) {
    ctx->save_for_backward({hidden, weight});
    ctx->saved_data["inv_temp"] = inv_temp;
    return Forward(hidden, weight, inv_temp);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& hidden = saved[0];
    const at::Tensor& weight = saved[1];
    const double inv_temp = ctx->saved_data["inv_temp"].toDouble();
    const at::Tensor g = grad_out[0].to(at::kFloat);  // [N]
    const int64_t n = hidden.size(0), chunk = Chunk(weight);
    at::Tensor grad_h = at::empty_like(hidden);
    const bool weight_grad = ctx->needs_input_grad(1);  // A frozen head (LoRA) takes none.
    at::Tensor grad_w = weight_grad ? at::zeros(weight.sizes(), weight.options().dtype(at::kFloat)) : at::Tensor();
    for (int64_t s = 0; s < n; s += chunk) {
      const int64_t len = std::min(chunk, n - s);
      at::Tensor h = hidden.narrow(0, s, len);
      at::Tensor logp = at::log_softmax(Logits(h, weight, inv_temp), -1);
      at::Tensor p = logp.exp();
      at::Tensor entropy = -(p * logp).sum(-1, /*keepdim=*/true);
      at::Tensor d = -(p * (logp + entropy)) * g.narrow(0, s, len).unsqueeze(1) * inv_temp;  // d loss / d logits
      at::Tensor dd = d.to(hidden.scalar_type());
      grad_h.narrow(0, s, len).copy_(at::matmul(dd, weight));
      if (weight_grad) grad_w.add_(at::matmul(dd.t(), h).to(at::kFloat));
    }
    return {grad_h, weight_grad ? grad_w.to(weight.scalar_type()) : at::Tensor(), at::Tensor()};
  }
};

}  // namespace

KVCache::KVCache(const ModelConfig& config, int64_t slots_in, int64_t capacity_in, at::TensorOptions options)
    : slots(slots_in), capacity(capacity_in) {
  for (int64_t l = 0; l < config.num_layers; ++l) {
    k.push_back(at::zeros({slots, config.num_kv_heads, capacity, config.head_dim}, options));
    v.push_back(at::zeros({slots, config.num_kv_heads, capacity, config.head_dim}, options));
  }
}

PagedKVCache::PagedKVCache(const ModelConfig& config, int64_t num_blocks_in, int64_t block_size_in,
                           at::TensorOptions options)
    : num_blocks(num_blocks_in), block_size(block_size_in) {
  for (int64_t l = 0; l < config.num_layers; ++l) {
    k.push_back(at::zeros({config.num_kv_heads, num_blocks, block_size, config.head_dim}, options));
    v.push_back(at::zeros({config.num_kv_heads, num_blocks, block_size, config.head_dim}, options));
  }
}

std::vector<at::Tensor*> Transformer::Layer::Fields() {
  return {&input_norm,     &qkv_w,      &qkv_b,          &o_w,          &o_b,           &post_norm,
          &gate_up_w,      &gate_up_b,  &down_w,         &down_b,       &qkv_lora_a,    &qkv_lora_b,
          &o_lora_a,       &o_lora_b,   &gate_up_lora_a, &gate_up_lora_b, &down_lora_a, &down_lora_b};
}

std::vector<const at::Tensor*> Transformer::Layer::Fields() const {
  std::vector<at::Tensor*> f = const_cast<Layer*>(this)->Fields();
  return std::vector<const at::Tensor*>(f.begin(), f.end());
}

namespace {
std::atomic<bool> g_cudnn_attention{false};  // AllowCudnnAttention.
}  // namespace

void AllowCudnnAttention(bool allow) {
  g_cudnn_attention = allow;
  at::globalContext().setSDPUseCuDNN(allow);
}

Transformer::Transformer(ModelConfig config, Head head, ModelOptions options)
    : config_(std::move(config)), head_(head), options_(options) {
  if (options_.device.is_cuda() && !g_cudnn_attention) at::globalContext().setSDPUseCuDNN(false);
  // inv_freq exactly as transformers computes it (fp32), then the scaling rule.
  const int64_t d = config_.head_dim;
  at::Tensor inv = 1.0 / at::pow(config_.rope_theta, at::arange(0, d, 2, at::kLong).to(at::kFloat) / static_cast<double>(d));
  const RopeScaling& rs = config_.rope_scaling;
  if (rs.type == "linear") {
    inv = inv / rs.factor;
  } else if (rs.type == "llama3") {
    const double low_wl = rs.original_max_position_embeddings / rs.low_freq_factor;
    const double high_wl = rs.original_max_position_embeddings / rs.high_freq_factor;
    at::Tensor wavelen = 2 * M_PI / inv;
    at::Tensor scaled = at::where(wavelen > low_wl, inv / rs.factor, inv);
    at::Tensor smooth = (rs.original_max_position_embeddings / wavelen - rs.low_freq_factor) /
                        (rs.high_freq_factor - rs.low_freq_factor);
    at::Tensor smoothed = (1 - smooth) * scaled / rs.factor + smooth * scaled;
    at::Tensor is_medium = (wavelen >= high_wl).logical_and(wavelen <= low_wl);
    inv = at::where(is_medium, smoothed, scaled);
  } else if (rs.type == "yarn") {
    // YaRN: interpolated frequencies (pos / factor) for the slow dimensions,
    // the original ones for the fast, a linear ramp between, and cos/sin
    // scaled by the attention factor.
    auto mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
    attention_scaling_ = rs.attention_factor > 0                     ? rs.attention_factor
                         : (rs.mscale > 0 && rs.mscale_all_dim > 0) ? mscale(rs.factor, rs.mscale) /
                                                                          mscale(rs.factor, rs.mscale_all_dim)
                                                                    : mscale(rs.factor, 1.0);
    const double base = config_.rope_theta, orig = static_cast<double>(rs.original_max_position_embeddings);
    auto correction_dim = [&](double rotations) {
      return d * std::log(orig / (rotations * 2 * M_PI)) / (2 * std::log(base));
    };
    double low = correction_dim(rs.beta_fast), high = correction_dim(rs.beta_slow);
    if (rs.truncate) low = std::floor(low), high = std::ceil(high);
    low = std::max(low, 0.0), high = std::min(high, static_cast<double>(d - 1));
    if (low == high) high += 0.001;  // No zero-width ramp.
    at::Tensor pos_freqs = at::pow(base, at::arange(0, d, 2, at::kLong).to(at::kFloat) / static_cast<double>(d));
    at::Tensor extrapolation = 1.0 / pos_freqs, interpolation = 1.0 / (rs.factor * pos_freqs);
    at::Tensor ramp = ((at::arange(d / 2, at::kFloat) - low) / (high - low)).clamp(0, 1);
    at::Tensor extrapolation_factor = 1 - ramp;
    inv = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  inv_freq_ = inv.to(options_.device);
}

absl::StatusOr<std::unique_ptr<Transformer>> Transformer::Create(const ModelConfig& config, Head head,
                                                                 const ModelOptions& options, uint64_t seed) {
  try {
    std::unique_ptr<Transformer> m(new Transformer(config, head, options));
    if (auto s = m->InitRandom(seed); !s.ok()) return s;
    return m;
  } catch (const std::exception& e) {
    return TorchError("creating model", e);
  }
}

absl::StatusOr<std::unique_ptr<Transformer>> Transformer::FromWeights(const ModelConfig& config, Head head,
                                                                      const ModelOptions& options, RootWeights root,
                                                                      std::vector<at::Tensor> layer_fields) {
  try {
    std::unique_ptr<Transformer> m(new Transformer(config, head, options));
    auto place = [&](const at::Tensor& t) { return t.defined() ? t.to(options.device, options.dtype) : t; };
    m->root_ = {place(root.embed), place(root.final_norm), place(root.lm_head), place(root.score_w),
                place(root.score_b)};
    // Per layer Layer::Fields() in order: the base fields alone, or all.
    const size_t layers = static_cast<size_t>(config.num_layers);
    const size_t per = layer_fields.size() == Layer::kFields * layers ? Layer::kFields : Layer::kBaseFields;
    if (layer_fields.size() != per * layers) {
      return absl::InvalidArgumentError(absl::StrCat("FromWeights: ", layer_fields.size(), " layer fields for ",
                                                     config.num_layers, " layers"));
    }
    for (size_t l = 0; l < layers; ++l) {
      Layer w;
      std::vector<at::Tensor*> f = w.Fields();
      for (size_t i = 0; i < per; ++i) *f[i] = place(layer_fields[per * l + i]);
      m->layers_.push_back(std::move(w));
    }
    if (layers > 0 && m->layers_[0].qkv_lora_a.defined()) {
      m->lora_rank_ = m->layers_[0].qkv_lora_a.size(0);
      m->lora_scale_ = LoraScale(options.lora_alpha, m->lora_rank_);
    }
    m->FinishParameters();
    return m;
  } catch (const std::exception& e) {
    return TorchError("model from weights", e);
  }
}

absl::Status Transformer::InitRandom(uint64_t seed) {
  const auto draw = DrawGenerator(options_, seed);  // Named, not bound: the lambdas below capture them.
  at::Generator gen = draw.first;
  const at::Device draw_device = draw.second;
  const auto& c = config_;
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  auto normal = [&](std::vector<int64_t> shape) {
    return at::normal(0.0, 0.02, shape, gen, at::TensorOptions().device(draw_device).dtype(at::kFloat))
        .to(options_.device, options_.dtype);
  };
  auto zeros = [&](int64_t n) { return at::zeros({n}, at::TensorOptions().device(options_.device).dtype(options_.dtype)); };
  auto ones = [&](int64_t n) { return at::ones({n}, at::TensorOptions().device(options_.device).dtype(options_.dtype)); };
  root_.embed = normal({c.vocab_size, c.hidden_size});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    Layer w;
    w.input_norm = ones(c.hidden_size);
    w.qkv_w = normal({q + 2 * kv, c.hidden_size});
    if (c.qkv_bias) w.qkv_b = zeros(q + 2 * kv);
    w.o_w = normal({c.hidden_size, q});
    if (c.o_bias) w.o_b = zeros(c.hidden_size);
    w.post_norm = ones(c.hidden_size);
    w.gate_up_w = normal({2 * c.intermediate_size, c.hidden_size});
    if (c.mlp_bias) w.gate_up_b = zeros(2 * c.intermediate_size);
    w.down_w = normal({c.hidden_size, c.intermediate_size});
    if (c.mlp_bias) w.down_b = zeros(c.hidden_size);
    layers_.push_back(std::move(w));
  }
  root_.final_norm = ones(c.hidden_size);
  if (head_ == Head::kValue) {
    root_.score_w = normal({1, c.hidden_size});
    root_.score_b = zeros(1);
  } else if (!c.tie_word_embeddings) {
    root_.lm_head = normal({c.vocab_size, c.hidden_size});
  }
  if (options_.lora_rank > 0) InitAdapters();
  FinishParameters();
  return absl::OkStatus();
}

void Transformer::InitAdapters() {
  const int64_t r = options_.lora_rank;
  lora_rank_ = r;
  lora_scale_ = LoraScale(options_.lora_alpha, r);
  const auto draw = DrawGenerator(options_, options_.lora_seed);
  at::Generator gen = draw.first;
  const at::Device draw_device = draw.second;
  const at::TensorOptions place = at::TensorOptions().device(options_.device).dtype(options_.dtype);
  for (Layer& l : layers_) {
    for (const Adapted& p : AdaptedProjections(l)) {
      const int64_t out = p.w->size(0), in = p.w->size(1);
      const double bound = 1.0 / std::sqrt(static_cast<double>(in));  // kaiming_uniform(a=sqrt(5)), as PEFT.
      *p.a = at::empty({r, in}, at::TensorOptions().device(draw_device).dtype(at::kFloat))
                 .uniform_(-bound, bound, gen)
                 .to(place);
      *p.b = at::zeros({out, r}, place);
    }
  }
}

absl::StatusOr<std::unique_ptr<Transformer>> Transformer::MergedCopy(const ModelOptions& options) const {
  if (provider_) return absl::FailedPreconditionError("MergedCopy of a sharded model: consolidate it first");
  ModelOptions o = options;
  o.lora_rank = 0;
  o.trainable = false;
  try {
    at::NoGradGuard no_grad;
    auto copy = [&](const at::Tensor& t) {
      return t.defined() ? t.detach().to(o.device, o.dtype, /*non_blocking=*/false, /*copy=*/true) : t;
    };
    const bool tied = head_ == Head::kLanguageModel && config_.tie_word_embeddings;
    RootWeights root{copy(root_.embed), copy(root_.final_norm), tied ? at::Tensor() : copy(root_.lm_head),
                     copy(root_.score_w), copy(root_.score_b)};
    std::vector<at::Tensor> fields;
    for (const Layer& layer : layers_) {
      Layer w = MergedLayer(layer, lora_scale_);
      const std::vector<at::Tensor*> f = w.Fields();
      for (size_t i = 0; i < Layer::kBaseFields; ++i) fields.push_back(copy(*f[i]));
    }
    return FromWeights(config_, head_, o, std::move(root), std::move(fields));
  } catch (const std::exception& e) {
    return TorchError("copying model", e);
  }
}

void Transformer::MergeAdapters() {
  if (lora_rank_ == 0) return;
  for (Layer& l : layers_) l = MergedLayer(l, lora_scale_);
  lora_rank_ = 0;
}

void Transformer::FinishParameters() {
  if (head_ == Head::kLanguageModel && config_.tie_word_embeddings) root_.lm_head = root_.embed;
  if (options_.trainable) {
    for (at::Tensor& p : parameters()) p.requires_grad_(true);
  }
}

absl::StatusOr<std::unique_ptr<Transformer>> Transformer::Load(const std::string& dir, Head head,
                                                               const ModelOptions& options) {
  auto config = ModelConfig::Load(dir + "/config.json");
  if (!config.ok()) return config.status();
  try {
    std::unique_ptr<Transformer> m(new Transformer(*config, head, options));
    if (auto s = m->LoadFrom(dir); !s.ok()) return s;
    return m;
  } catch (const std::exception& e) {
    return TorchError(absl::StrCat("loading model from ", dir), e);
  }
}

absl::Status Transformer::LoadFrom(const std::string& dir) {
  auto st = SafetensorsDir::Open(dir);
  if (!st.ok()) return st.status();
  const auto& c = config_;
  std::set<std::string> used;
  auto get = [&](const std::string& name, std::vector<int64_t> shape, at::Tensor* out) -> absl::Status {
    const TensorView* v = (*st)->Find(name);
    if (v == nullptr) return absl::NotFoundError(absl::StrCat(dir, ": checkpoint lacks tensor ", name));
    if (v->shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(dir, ": tensor ", name, " has shape [",
                                                     absl::StrJoin(v->shape, ","), "], config implies [",
                                                     absl::StrJoin(shape, ","), "]"));
    }
    auto type = ToScalarType(v->dtype);
    if (!type.ok()) return type.status();
    if (*type != at::kFloat && *type != at::kBFloat16 && *type != at::kHalf && *type != at::kDouble) {
      return absl::InvalidArgumentError(absl::StrCat(dir, ": tensor ", name, " is not floating point"));
    }
    at::Tensor cpu = at::from_blob(const_cast<uint8_t*>(v->data), shape, at::TensorOptions().dtype(*type));
    *out = cpu.to(options_.device, options_.dtype, /*non_blocking=*/false, /*copy=*/true);
    used.insert(name);
    return absl::OkStatus();
  };
  const int64_t H = c.hidden_size, Q = c.num_heads * c.head_dim, KV = c.num_kv_heads * c.head_dim;
  const int64_t I = c.intermediate_size;
  const std::string base = head_ == Head::kValue ? "model." : "model.";
  if (auto s = get(base + "embed_tokens.weight", {c.vocab_size, H}, &root_.embed); !s.ok()) return s;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = absl::StrCat(base, "layers.", l, ".");
    Layer w;
    at::Tensor q, k, v, qb, kb, vb, gate, up;
    absl::Status s = get(p + "input_layernorm.weight", {H}, &w.input_norm);
    if (s.ok()) s = get(p + "self_attn.q_proj.weight", {Q, H}, &q);
    if (s.ok()) s = get(p + "self_attn.k_proj.weight", {KV, H}, &k);
    if (s.ok()) s = get(p + "self_attn.v_proj.weight", {KV, H}, &v);
    if (s.ok() && c.qkv_bias) s = get(p + "self_attn.q_proj.bias", {Q}, &qb);
    if (s.ok() && c.qkv_bias) s = get(p + "self_attn.k_proj.bias", {KV}, &kb);
    if (s.ok() && c.qkv_bias) s = get(p + "self_attn.v_proj.bias", {KV}, &vb);
    if (s.ok()) s = get(p + "self_attn.o_proj.weight", {H, Q}, &w.o_w);
    if (s.ok() && c.o_bias) s = get(p + "self_attn.o_proj.bias", {H}, &w.o_b);
    if (s.ok()) s = get(p + "post_attention_layernorm.weight", {H}, &w.post_norm);
    if (s.ok()) s = get(p + "mlp.gate_proj.weight", {I, H}, &gate);
    if (s.ok()) s = get(p + "mlp.up_proj.weight", {I, H}, &up);
    if (s.ok()) s = get(p + "mlp.down_proj.weight", {H, I}, &w.down_w);
    at::Tensor gb, ub;
    if (s.ok() && c.mlp_bias) s = get(p + "mlp.gate_proj.bias", {I}, &gb);
    if (s.ok() && c.mlp_bias) s = get(p + "mlp.up_proj.bias", {I}, &ub);
    if (s.ok() && c.mlp_bias) s = get(p + "mlp.down_proj.bias", {H}, &w.down_b);
    if (!s.ok()) return s;
    w.qkv_w = at::cat({q, k, v}, 0);
    if (c.qkv_bias) w.qkv_b = at::cat({qb, kb, vb}, 0);
    w.gate_up_w = at::cat({gate, up}, 0);
    if (c.mlp_bias) w.gate_up_b = at::cat({gb, ub}, 0);
    layers_.push_back(std::move(w));
  }
  if (auto s = get(base + "norm.weight", {H}, &root_.final_norm); !s.ok()) return s;
  if (head_ == Head::kValue && (*st)->Find("score.weight") == nullptr) {
    // A critic started from a language model: its trunk, a fresh value
    // head (zero, so every first value is 0).
    root_.score_w = at::zeros({1, H}, at::TensorOptions().device(options_.device).dtype(options_.dtype));
    root_.score_b = at::zeros({1}, root_.score_w.options());
  } else if (head_ == Head::kValue) {
    if (auto s = get("score.weight", {1, H}, &root_.score_w); !s.ok()) return s;
    value_head_loaded_ = true;
    if ((*st)->Find("score.bias") != nullptr) {
      if (auto s = get("score.bias", {1}, &root_.score_b); !s.ok()) return s;
    }
  } else if (!c.tie_word_embeddings) {
    if (auto s = get("lm_head.weight", {c.vocab_size, H}, &root_.lm_head); !s.ok()) return s;
  }
  for (const std::string& name : (*st)->Names()) {
    if (used.count(name)) continue;
    // Tolerated leftovers: rotary buffers of old checkpoints, and an lm_head
    // stored alongside tied embeddings.
    if (absl::EndsWith(name, "rotary_emb.inv_freq")) continue;
    if (name == "lm_head.weight" && (c.tie_word_embeddings || head_ == Head::kValue)) continue;
    return absl::InvalidArgumentError(absl::StrCat(dir, ": unexpected tensor ", name,
                                                   " (wrong architecture for this config?)"));
  }
  if (auto s = LoadAdapters(dir); !s.ok()) return s;
  FinishParameters();
  return absl::OkStatus();
}

namespace {

constexpr char kAdapterConfig[] = "adapter_config.json";
constexpr char kAdapterWeights[] = "adapter_model.safetensors";

// PEFT's module names of each adapted projection and the rows of our fused
// matrix each one covers, in AdaptedProjections() order.
struct PeftModule {
  const char* name;
  int64_t begin, rows;
};
std::vector<std::vector<PeftModule>> PeftModules(const ModelConfig& c) {
  const int64_t Q = c.num_heads * c.head_dim, KV = c.num_kv_heads * c.head_dim, I = c.intermediate_size;
  return {{{"self_attn.q_proj", 0, Q}, {"self_attn.k_proj", Q, KV}, {"self_attn.v_proj", Q + KV, KV}},
          {{"self_attn.o_proj", 0, c.hidden_size}},
          {{"mlp.gate_proj", 0, I}, {"mlp.up_proj", I, I}},
          {{"mlp.down_proj", 0, c.hidden_size}}};
}

std::string PeftPrefix(int64_t layer) { return absl::StrCat("base_model.model.model.layers.", layer, "."); }

}  // namespace

absl::Status Transformer::LoadAdapters(const std::string& dir) {
  const std::string config_path = dir + "/" + kAdapterConfig;
  if (::access(config_path.c_str(), F_OK) != 0) {
    if (options_.lora_rank > 0) InitAdapters();
    return absl::OkStatus();
  }
  auto text = ReadFileToString(config_path);
  if (!text.ok()) return text.status();
  auto cfg = ParseJson(*text);
  if (!cfg.ok()) return absl::DataLossError(absl::StrCat(config_path, ": ", cfg.status().message()));
  auto type = GetJsonString(*cfg, "peft_type", "");
  auto r = GetJsonInt(*cfg, "r", 0);
  auto alpha = GetJsonDouble(*cfg, "lora_alpha", 0);
  if (!type.ok() || !r.ok() || !alpha.ok() || *type != "LORA" || *r <= 0 || *alpha <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": not a LoRA adapter config (peft_type LORA, r > 0, lora_alpha > 0)"));
  }
  if (options_.lora_rank > 0 && options_.lora_rank != *r) {
    return absl::InvalidArgumentError(absl::StrCat(dir, " holds rank-", *r, " adapters; rank ", options_.lora_rank,
                                                   " was asked for"));
  }
  auto file = SafetensorsFile::Open(dir + "/" + kAdapterWeights);
  if (!file.ok()) return file.status();
  std::set<std::string> used;
  auto read = [&](const std::string& name, std::vector<int64_t> shape) -> absl::StatusOr<at::Tensor> {
    const TensorView* v = (*file)->Find(name);
    if (v == nullptr) return absl::NotFoundError(absl::StrCat(dir, ": adapter lacks ", name));
    auto t = ToScalarType(v->dtype);
    if (!t.ok()) return t.status();
    if (v->shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(dir, ": adapter tensor ", name, " has shape [",
                                                     absl::StrJoin(v->shape, ","), "], expected [",
                                                     absl::StrJoin(shape, ","), "]"));
    }
    used.insert(name);
    return at::from_blob(const_cast<uint8_t*>(v->data), shape, at::TensorOptions().dtype(*t))
        .to(options_.device, options_.dtype, /*non_blocking=*/false, /*copy=*/true);
  };
  const auto modules = PeftModules(config_);
  for (size_t l = 0; l < layers_.size(); ++l) {
    std::vector<Adapted> proj = AdaptedProjections(layers_[l]);
    for (size_t p = 0; p < proj.size(); ++p) {
      const int64_t in = proj[p].w->size(1);
      std::vector<at::Tensor> bs;
      for (const PeftModule& m : modules[p]) {
        const std::string name = PeftPrefix(l) + m.name;
        auto a = read(name + ".lora_A.weight", {*r, in});
        if (!a.ok()) return a.status();
        auto b = read(name + ".lora_B.weight", {m.rows, *r});
        if (!b.ok()) return b.status();
        if (!proj[p].a->defined()) {
          *proj[p].a = *a;
        } else if (!at::equal(*proj[p].a, *a)) {  // One A per fused matrix.
          return absl::InvalidArgumentError(absl::StrCat(dir, ": ", name, ".lora_A differs from ", modules[p][0].name,
                                                         "'s; adapters of fused projections share one A"));
        }
        bs.push_back(*b);
      }
      *proj[p].b = at::cat(bs, 0);
    }
  }
  for (const TensorView& v : (*file)->tensors()) {
    if (!used.count(v.name)) return absl::InvalidArgumentError(absl::StrCat(dir, ": unexpected adapter tensor ", v.name));
  }
  lora_rank_ = *r;
  lora_scale_ = *alpha / *r;
  if (options_.lora_rank == 0) MergeAdapters();  // A model without adapters: the policy they make.
  return absl::OkStatus();
}

std::vector<std::pair<std::string, at::Tensor>> Transformer::AdapterTensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  if (lora_rank_ == 0) return out;
  const auto modules = PeftModules(config_);
  for (size_t l = 0; l < layers_.size(); ++l) {
    std::vector<Adapted> proj = AdaptedProjections(const_cast<Layer&>(layers_[l]));
    for (size_t p = 0; p < proj.size(); ++p) {
      for (const PeftModule& m : modules[p]) {
        const std::string name = PeftPrefix(l) + m.name;
        out.emplace_back(name + ".lora_A.weight", *proj[p].a);
        out.emplace_back(name + ".lora_B.weight", proj[p].b->narrow(0, m.begin, m.rows));
      }
    }
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> Transformer::HFTensors(bool merged) const {
  TORCH_CHECK(!provider_, "HFTensors of a sharded model: consolidate it first");
  const auto& c = config_;
  const int64_t Q = c.num_heads * c.head_dim, KV = c.num_kv_heads * c.head_dim, I = c.intermediate_size;
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.emplace_back("model.embed_tokens.weight", root_.embed);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const Layer w = merged ? MergedLayer(layers_[l], lora_scale_) : layers_[l];
    const std::string p = absl::StrCat("model.layers.", l, ".");
    out.emplace_back(p + "input_layernorm.weight", w.input_norm);
    out.emplace_back(p + "self_attn.q_proj.weight", w.qkv_w.narrow(0, 0, Q));
    out.emplace_back(p + "self_attn.k_proj.weight", w.qkv_w.narrow(0, Q, KV));
    out.emplace_back(p + "self_attn.v_proj.weight", w.qkv_w.narrow(0, Q + KV, KV));
    if (w.qkv_b.defined()) {
      out.emplace_back(p + "self_attn.q_proj.bias", w.qkv_b.narrow(0, 0, Q));
      out.emplace_back(p + "self_attn.k_proj.bias", w.qkv_b.narrow(0, Q, KV));
      out.emplace_back(p + "self_attn.v_proj.bias", w.qkv_b.narrow(0, Q + KV, KV));
    }
    out.emplace_back(p + "self_attn.o_proj.weight", w.o_w);
    if (w.o_b.defined()) out.emplace_back(p + "self_attn.o_proj.bias", w.o_b);
    out.emplace_back(p + "post_attention_layernorm.weight", w.post_norm);
    out.emplace_back(p + "mlp.gate_proj.weight", w.gate_up_w.narrow(0, 0, I));
    out.emplace_back(p + "mlp.up_proj.weight", w.gate_up_w.narrow(0, I, I));
    if (w.gate_up_b.defined()) {
      out.emplace_back(p + "mlp.gate_proj.bias", w.gate_up_b.narrow(0, 0, I));
      out.emplace_back(p + "mlp.up_proj.bias", w.gate_up_b.narrow(0, I, I));
    }
    out.emplace_back(p + "mlp.down_proj.weight", w.down_w);
    if (w.down_b.defined()) out.emplace_back(p + "mlp.down_proj.bias", w.down_b);
  }
  out.emplace_back("model.norm.weight", root_.final_norm);
  if (head_ == Head::kValue) {
    out.emplace_back("score.weight", root_.score_w);
    if (root_.score_b.defined()) out.emplace_back("score.bias", root_.score_b);
  } else if (!c.tie_word_embeddings) {
    out.emplace_back("lm_head.weight", root_.lm_head);
  }
  return out;
}

void Transformer::SetWeightProvider(std::unique_ptr<WeightProvider> provider, at::Device device,
                                    at::ScalarType dtype) {
  provider_ = std::move(provider);
  root_ = RootWeights();
  for (Layer& w : layers_) w = Layer();
  options_.device = device;
  options_.dtype = dtype;
  inv_freq_ = inv_freq_.to(device);
}

std::vector<at::Tensor> Transformer::parameters() const {
  if (provider_) return provider_->parameters();
  std::vector<at::Tensor> ps;
  if (lora_rank_ > 0) {  // The adapters, then a value model's head; the rest is frozen.
    for (const Layer& w : layers_) {
      const std::vector<const at::Tensor*> f = w.Fields();
      for (size_t i = Layer::kBaseFields; i < f.size(); ++i) ps.push_back(*f[i]);
    }
    if (head_ == Head::kValue) {
      ps.push_back(root_.score_w);
      if (root_.score_b.defined()) ps.push_back(root_.score_b);
    }
    return ps;
  }
  ps.push_back(root_.embed);
  for (const Layer& w : layers_) {
    for (const at::Tensor* t : w.Fields()) {
      if (t->defined()) ps.push_back(*t);
    }
  }
  ps.push_back(root_.final_norm);
  if (head_ == Head::kValue) {
    ps.push_back(root_.score_w);
    if (root_.score_b.defined()) ps.push_back(root_.score_b);
  } else if (!config_.tie_word_embeddings) {
    ps.push_back(root_.lm_head);
  }
  return ps;
}

namespace {

// CPU copies of `named` and the writer's views of them (alive while `keep` is).
absl::StatusOr<std::vector<TensorToWrite>> ToWrite(const std::vector<std::pair<std::string, at::Tensor>>& named,
                                                   std::vector<at::Tensor>* keep) {
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, t] : named) {
    at::Tensor cpu = t.detach().to(at::kCPU).contiguous();
    auto dt = ToDType(cpu.scalar_type());
    if (!dt.ok()) return dt.status();
    keep->push_back(cpu);
    tensors.push_back({name, *dt, cpu.sizes().vec(), cpu.data_ptr(), cpu.nbytes()});
  }
  return tensors;
}

}  // namespace

absl::Status Transformer::Save(const std::string& dir) const {
  if (auto s = SaveTensors(dir, HFTensors()); !s.ok() || lora_rank_ == 0) return s;
  try {
    std::vector<at::Tensor> keep;
    auto tensors = ToWrite(AdapterTensors(), &keep);
    if (!tensors.ok()) return tensors.status();
    if (auto s = WriteSafetensors(dir + "/" + kAdapterWeights, *tensors); !s.ok()) return s;
  } catch (const std::exception& e) {
    return TorchError(absl::StrCat("saving adapters to ", dir), e);
  }
  const double alpha = lora_scale_ * static_cast<double>(lora_rank_);
  Json targets = Json::array();
  for (const auto& group : PeftModules(config_)) {
    for (const PeftModule& m : group) targets.push_back(Json(std::string(m.name).substr(std::string(m.name).find('.') + 1)));
  }
  Json cfg = Json::object({{"peft_type", Json("LORA")},
                           {"task_type", Json(head_ == Head::kValue ? "TOKEN_CLS" : "CAUSAL_LM")},
                           {"r", Json(lora_rank_)},
                           {"lora_alpha", Json(alpha)},
                           {"lora_dropout", Json(0.0)},
                           {"bias", Json("none")},
                           {"fan_in_fan_out", Json(false)},
                           {"target_modules", targets},
                           {"base_model_name_or_path", Json("")}});  // The base: this directory's weights.
  return WriteFileAtomically(dir + "/" + kAdapterConfig, DumpJson(cfg, 2));
}

absl::Status Transformer::SaveMerged(const std::string& dir) const { return SaveTensors(dir, HFTensors(/*merged=*/true)); }

absl::Status Transformer::SaveTensors(const std::string& dir,
                                      const std::vector<std::pair<std::string, at::Tensor>>& named) const {
  try {
    ::mkdir(dir.c_str(), 0755);
    std::vector<at::Tensor> keep;  // CPU copies alive until written.
    auto tensors = ToWrite(named, &keep);
    if (!tensors.ok()) return tensors.status();
    if (auto s = WriteSafetensorsDir(dir, *tensors, size_t{4} << 30); !s.ok()) return s;
    Json cfg = config_.ToJson();
    cfg["torch_dtype"] = Json(HFDTypeName(options_.dtype));
    cfg["dtype"] = Json(HFDTypeName(options_.dtype));
    if (head_ == Head::kValue) {
      cfg["architectures"] = Json::array({Json(config_.model_type == "qwen2" ? "Qwen2ForTokenClassification"
                                                                                          : "LlamaForTokenClassification")});
      cfg["num_labels"] = Json(1);
    }
    return WriteFileAtomically(dir + "/config.json", DumpJson(cfg, 2));
  } catch (const std::exception& e) {
    return TorchError(absl::StrCat("saving model to ", dir), e);
  }
}

std::pair<at::Tensor, at::Tensor> Transformer::Rope(const at::Tensor& positions) const {
  // As transformers: freqs = pos * inv_freq in fp32, emb = [freqs, freqs].
  at::Tensor freqs = positions.to(at::kFloat).unsqueeze(-1) * inv_freq_;  // [B,T,D/2]
  at::Tensor emb = at::cat({freqs, freqs}, -1).unsqueeze(1);                // [B,1,T,D]
  if (attention_scaling_ != 1.0) {
    return {(emb.cos() * attention_scaling_).to(options_.dtype), (emb.sin() * attention_scaling_).to(options_.dtype)};
  }
  return {emb.cos().to(options_.dtype), emb.sin().to(options_.dtype)};
}

at::Tensor Transformer::Norm(const at::Tensor& x, const at::Tensor& w) const {
  if (x.is_cuda()) return at::rms_norm(x, {x.size(-1)}, w, config_.rms_norm_eps);
  // transformers' order of operations, for exact fp32 parity on CPU.
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor var = xf.pow(2).mean(-1, /*keepdim=*/true);
  return w * (xf * at::rsqrt(var + config_.rms_norm_eps)).to(x.scalar_type());
}

at::Tensor Transformer::BlockForward(const Layer& w, const at::Tensor& x, const at::Tensor& cos,
                                     const at::Tensor& sin, KVCache* cache, int layer, const at::Tensor& slots,
                                     const DecodeState* decode, const std::vector<int64_t>& lengths,
                                     const PagedState* paged) const {
  const auto& c = config_;
  const int64_t B = x.size(0), T = x.size(1);
  const int64_t nh = c.num_heads, kvh = c.num_kv_heads, D = c.head_dim, Q = nh * D, KV = kvh * D;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  at::Tensor h = Norm(x, w.input_norm);
  at::Tensor qkv = Project(h, w.qkv_w, w.qkv_b, w.qkv_lora_a, w.qkv_lora_b, lora_scale_);  // [B,T,Q+2KV]
  // split (not narrow): its backward concatenates instead of zero-filling.
  at::Tensor q, k, v;  // [B,heads,T,D]
  if (fused_on(x)) {
    auto split = FusedRopeSplit(qkv, cos, sin, {static_cast<int>(nh), static_cast<int>(kvh), static_cast<int>(D)});
    q = split[0], k = split[1], v = split[2];
  } else {
    auto qk_v = qkv.split_with_sizes({Q + KV, KV}, -1);
    at::Tensor qk = qk_v[0].view({B, T, nh + kvh, D}).transpose(1, 2);  // [B,nh+kvh,T,D]
    v = qk_v[1].view({B, T, kvh, D}).transpose(1, 2);                   // [B,kvh,T,D]
    qk = qk * cos + RotateHalf(qk) * sin;  // RoPE on q and k in one pass.
    auto q_k = qk.split_with_sizes({nh, kvh}, 1);
    q = q_k[0], k = q_k[1];
  }
  at::Tensor a;
  if (paged != nullptr) {
    a = PagedAttention(q, k, v, layer, *paged);
  } else if (decode != nullptr) {
    // T == 1: write this position, then attend over [0, max_len) of the
    // row; later positions carry a -inf bias. GQA without copying K/V:
    // query heads grouped under their KV head, scale and bias fused into
    // one batched GEMM.
    const DecodeState& d = *decode;
    cache->k[layer].index_put_({d.slots, Slice(), d.positions}, k.squeeze(2));
    cache->v[layer].index_put_({d.slots, Slice(), d.positions}, v.squeeze(2));
    at::Tensor kc = d.slots_are_prefix ? cache->k[layer].narrow(0, 0, B) : cache->k[layer].index_select(0, d.slots);
    at::Tensor vc = d.slots_are_prefix ? cache->v[layer].narrow(0, 0, B) : cache->v[layer].index_select(0, d.slots);
    kc = kc.narrow(2, 0, d.max_len).reshape({B * kvh, d.max_len, D});
    vc = vc.narrow(2, 0, d.max_len).reshape({B * kvh, d.max_len, D});
    at::Tensor qg = q.reshape({B * kvh, nh / kvh, D});
    at::Tensor scores = at::baddbmm(d.bias, qg, kc.transpose(1, 2), 1.0, scale);  // [B*kvh,G,L]
    a = at::bmm(at::_softmax(scores, -1, false), vc).reshape({B, 1, Q});
  } else {
    if (cache != nullptr) {
      cache->k[layer].narrow(2, 0, T).index_copy_(0, slots, k);
      cache->v[layer].narrow(2, 0, T).index_copy_(0, slots, v);
    }
    if (lengths.size() <= 1) {
      a = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true, scale,
                                           /*enable_gqa=*/kvh != nh);
    } else {
      // Packed row: causal attention inside each sequence, one call each
      // (no [T,T] block-diagonal mask; every call can use the fused kernels).
      std::vector<at::Tensor> parts;
      int64_t begin = 0;
      for (int64_t n : lengths) {
        parts.push_back(at::scaled_dot_product_attention(q.narrow(2, begin, n), k.narrow(2, begin, n),
                                                         v.narrow(2, begin, n), {}, 0.0, /*is_causal=*/true, scale,
                                                         /*enable_gqa=*/kvh != nh));
        begin += n;
      }
      a = at::cat(parts, 2);
    }
    a = a.transpose(1, 2).reshape({B, T, Q});
  }
  at::Tensor x1 = x + Project(a, w.o_w, w.o_b, w.o_lora_a, w.o_lora_b, lora_scale_);
  at::Tensor gu = Project(Norm(x1, w.post_norm), w.gate_up_w, w.gate_up_b, w.gate_up_lora_a, w.gate_up_lora_b, lora_scale_);  // [B,T,2I]
  at::Tensor act;
  if (fused_on(x)) {
    act = FusedSwiGlu(gu);
  } else {
    auto g_u = gu.split(c.intermediate_size, -1);
    act = at::silu(g_u[0]) * g_u[1];
  }
  return x1 + Project(act, w.down_w, w.down_b, w.down_lora_a, w.down_lora_b, lora_scale_);
}

void Transformer::SaveBlockInput(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                                 const at::Tensor& sin) const {
  if (!options_.offload_activations || !x.is_cuda()) {
    ctx->save_for_backward({x, cos, sin});
    return;
  }
  // Ordered on the compute stream: the copy completes before any later
  // kernel can reuse x's memory, and the host allocator keeps the pinned
  // block until the copy is done.
  at::Tensor host = at::empty(x.sizes(), at::TensorOptions().dtype(x.scalar_type()).pinned_memory(true));
  host.copy_(x, /*non_blocking=*/true);
  ctx->saved_data["x_host"] = host;
  ctx->save_for_backward({cos, sin});
}

std::vector<at::Tensor> Transformer::SavedBlockInput(torch::autograd::AutogradContext* ctx) const {
  std::vector<at::Tensor> saved = ctx->get_saved_variables();
  auto host = ctx->saved_data.find("x_host");
  if (host == ctx->saved_data.end()) return saved;
  at::Tensor x = host->second.toTensor().to(options_.device, /*non_blocking=*/true);
  ctx->saved_data.erase(host);
  return {x, saved[0], saved[1]};
}

at::Tensor Transformer::Block(int layer, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                              const std::vector<int64_t>& lengths) const {
  if (provider_) return provider_->Block(*this, layer, x, cos, sin, lengths);
  const Layer& w = layers_[layer];
  if (options_.activation_checkpointing && at::GradMode::is_enabled()) {
    std::vector<at::Tensor> params;  // Those autograd reaches: frozen base weights take no gradient.
    for (const at::Tensor* t : w.Fields()) {
      if (t->defined() && t->requires_grad()) params.push_back(*t);
    }
    return CheckpointedBlock::apply(x, cos, sin, at::TensorList(params), this, &w, lengths);
  }
  return BlockForward(w, x, cos, sin, nullptr, 0, {}, nullptr, lengths);
}

at::Tensor Transformer::Hidden(const at::Tensor& ids) const { return Hidden(ids, {}); }

at::Tensor Transformer::Hidden(const at::Tensor& ids, const std::vector<int64_t>& lengths) const {
  const int64_t B = ids.size(0), T = ids.size(1);
  at::Tensor positions;
  if (lengths.size() <= 1) {
    positions = at::arange(T, ids.options().dtype(at::kLong)).unsqueeze(0).expand({B, T});
  } else {
    TORCH_CHECK(B == 1, "packed sequences need one row, got ", B);
    std::vector<int64_t> pos;
    pos.reserve(T);
    for (int64_t n : lengths) {
      for (int64_t i = 0; i < n; ++i) pos.push_back(i);
    }
    TORCH_CHECK(static_cast<int64_t>(pos.size()) == T, "packed lengths sum to ", pos.size(), ", row has ", T);
    positions = at::tensor(pos, at::kLong).to(ids.device()).unsqueeze(0);
  }
  auto [cos, sin] = Rope(positions);
  if (provider_) root_ = provider_->Root();
  at::Tensor x = at::embedding(root_.embed, ids);
  for (int l = 0; l < config_.num_layers; ++l) x = Block(l, x, cos, sin, lengths);
  return Norm(x, root_.final_norm);
}

at::Tensor Transformer::TokenEntropy(const at::Tensor& hidden, double temperature, bool with_grad) const {
  at::Tensor h = hidden.reshape({-1, hidden.size(-1)});
  at::Tensor out;
  if (with_grad) {
    out = ChunkedTokenEntropy::apply(h, root_.lm_head, 1.0 / temperature);
  } else {
    at::NoGradGuard no_grad;
    out = ChunkedTokenEntropy::Forward(h.detach(), root_.lm_head, 1.0 / temperature);
  }
  return out.view(hidden.sizes().slice(0, hidden.dim() - 1));
}

at::Tensor Transformer::Logits(const at::Tensor& ids) const { return HeadLogits(Hidden(ids)); }

at::Tensor Transformer::HeadLogits(const at::Tensor& hidden) const {
  return at::linear(hidden, root_.lm_head).to(at::kFloat);
}

at::Tensor Transformer::TokenLogprobs(const at::Tensor& hidden, const at::Tensor& targets, double temperature) const {
  at::Tensor h = hidden.reshape({-1, hidden.size(-1)});
  at::Tensor t = targets.reshape({-1}).to(at::kLong);
  at::Tensor out = options_.fused_kernels
                       ? FusedTokenLogprobs(h, root_.lm_head, t, 1.0 / temperature, options_.keep_logits_bytes)
                       : ChunkedTokenLogprobs::apply(h, root_.lm_head, t, 1.0 / temperature);
  return out.view(targets.sizes());
}

at::Tensor Transformer::Values(const at::Tensor& hidden) const {
  return Linear(hidden, root_.score_w, root_.score_b).squeeze(-1).to(at::kFloat);
}

at::Tensor Transformer::Prefill(const at::Tensor& ids, const at::Tensor& slots, KVCache* cache) const {
  TORCH_CHECK(!provider_, "generation needs resident weights, not a WeightProvider's");
  const int64_t B = ids.size(0), T = ids.size(1);
  at::Tensor positions = at::arange(T, ids.options().dtype(at::kLong)).unsqueeze(0).expand({B, T});
  auto [cos, sin] = Rope(positions);
  at::Tensor x = at::embedding(root_.embed, ids);
  for (int l = 0; l < config_.num_layers; ++l) {
    x = BlockForward(layers_[l], x, cos, sin, cache, l, slots, nullptr);
  }
  return Norm(x, root_.final_norm);
}

at::Tensor Transformer::Decode(const std::vector<int64_t>& ids, const std::vector<int64_t>& slots,
                               const std::vector<int64_t>& positions, KVCache* cache) const {
  TORCH_CHECK(!provider_, "generation needs resident weights, not a WeightProvider's");
  const int64_t B = static_cast<int64_t>(ids.size());
  const at::Device device = options_.device;
  // One host-to-device copy for ids, slots and positions.
  std::vector<int64_t> packed(ids);
  packed.insert(packed.end(), slots.begin(), slots.end());
  packed.insert(packed.end(), positions.begin(), positions.end());
  at::Tensor dev = at::tensor(packed, at::kLong).to(device);
  DecodeState d;
  d.slots = dev.narrow(0, B, B);
  d.positions = dev.narrow(0, 2 * B, B);
  d.max_len = *std::max_element(positions.begin(), positions.end()) + 1;
  d.slots_are_prefix = true;
  for (int64_t i = 0; i < B; ++i) d.slots_are_prefix &= slots[i] == i;
  // Additive mask: -inf on keys after each row's position, per (row, kv head).
  at::Tensor later = at::arange(d.max_len, dev.options()).unsqueeze(0).gt(d.positions.unsqueeze(1));  // [B,L]
  d.bias = at::zeros({B, d.max_len}, dev.options().dtype(options_.dtype))
               .masked_fill_(later, -std::numeric_limits<float>::infinity())
               .repeat_interleave(config_.num_kv_heads, 0)
               .unsqueeze(1);  // [B*kvh,1,L]
  auto [cos, sin] = Rope(d.positions.unsqueeze(1));
  at::Tensor x = at::embedding(root_.embed, dev.narrow(0, 0, B).unsqueeze(1));  // [B,1,H]
  for (int l = 0; l < config_.num_layers; ++l) x = BlockForward(layers_[l], x, cos, sin, cache, l, {}, &d);
  return HeadLogits(Norm(x, root_.final_norm).squeeze(1));
}

at::Tensor Transformer::PagedAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int layer,
                                      const PagedState& st) const {
  const auto& c = config_;
  const int64_t B = q.size(0), T = q.size(2);
  const int64_t nh = c.num_heads, kvh = c.num_kv_heads, D = c.head_dim, G = nh / kvh, Q = nh * D;
  const int64_t S = static_cast<int64_t>(st.starts.size()), bs = st.cache->block_size;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  at::Tensor& kc = st.cache->k[layer];
  at::Tensor& vc = st.cache->v[layer];
  // New tokens in packed order (row-major over [B,T]) into their slots.
  kc.view({kvh, -1, D}).index_copy_(1, st.write, k.transpose(0, 1).reshape({kvh, B * T, D}));
  vc.view({kvh, -1, D}).index_copy_(1, st.write, v.transpose(0, 1).reshape({kvh, B * T, D}));
  if (st.decode && st.decode_kernel) {  // Read through the block tables in place.
    return PagedDecodeAttention(q.reshape({S, nh, D}), kc, vc, st.table, st.positions, scale).view({S, 1, Q});
  }
  if (st.decode) {
    // q [S,nh,1,D]; each sequence's blocks gathered into [kvh*S, L, D]
    // (heads leading, as stored), query heads grouped under their KV head.
    const int64_t L = st.max_blocks * bs;
    at::Tensor idx = st.table.reshape({-1});
    at::Tensor kg = kc.index_select(1, idx).view({kvh * S, L, D});
    at::Tensor vg = vc.index_select(1, idx).view({kvh * S, L, D});
    at::Tensor qg = q.reshape({S, kvh, G, D}).transpose(0, 1).reshape({kvh * S, G, D});
    at::Tensor scores = at::baddbmm(st.bias, qg, kg.transpose(1, 2), 1.0, scale);  // [kvh*S,G,L]
    at::Tensor o = at::bmm(at::_softmax(scores, -1, false), vg);                    // [kvh*S,G,D]
    return o.view({kvh, S, G, D}).permute({1, 0, 2, 3}).reshape({S, 1, Q});
  }
  // Prefill: q [1,nh,N,D], one attention per sequence, or per run of
  // neighbours with nothing cached and equal lengths (a batch of fresh
  // prompts of one length: one call).
  std::vector<at::Tensor> parts;
  int64_t off = 0;
  for (int64_t i = 0; i < S;) {
    const int64_t s = st.starts[i], n = st.lengths[i];
    if (s == 0) {  // Nothing cached before: plain causal attention on the new keys.
      int64_t g = 1;
      while (i + g < S && st.starts[i + g] == 0 && st.lengths[i + g] == n) ++g;
      auto rows = [&](const at::Tensor& t) {  // [1,h,g*n,D] -> [g,h,n,D]
        return t.narrow(2, off, g * n).reshape({t.size(1), g, n, D}).transpose(0, 1);
      };
      at::Tensor o = at::scaled_dot_product_attention(rows(q), rows(k), rows(v), {}, 0.0, /*is_causal=*/true, scale,
                                                      /*enable_gqa=*/kvh != nh);  // [g,nh,n,D]
      parts.push_back(o.transpose(0, 1).reshape({1, nh, g * n, D}));
      off += g * n;
      i += g;
      continue;
    }
    {
      at::Tensor qi = q.narrow(2, off, n);
      const int64_t nb = (s + n + bs - 1) / bs;
      at::Tensor blocks = st.table[i].narrow(0, 0, nb);
      // [kvh, s+n, D] -> query heads' copies [1, nh, s+n, D] (a masked SDPA
      // with GQA has no fused kernel on every backend; the copy does).
      at::Tensor ki = kc.index_select(1, blocks).view({kvh, nb * bs, D}).narrow(1, 0, s + n);
      at::Tensor vi = vc.index_select(1, blocks).view({kvh, nb * bs, D}).narrow(1, 0, s + n);
      ki = ki.repeat_interleave(G, 0).unsqueeze(0);
      vi = vi.repeat_interleave(G, 0).unsqueeze(0);
      parts.push_back(at::scaled_dot_product_attention(qi, ki, vi, st.masks[i], 0.0, /*is_causal=*/false, scale));
    }
    off += n;
    ++i;
  }
  at::Tensor a = parts.size() == 1 ? parts[0] : at::cat(parts, 2);  // [1,nh,N,D]
  return a.transpose(1, 2).reshape({B, T, Q});
}

at::Tensor Transformer::PagedDecodeHidden(const at::Tensor& ids, const at::Tensor& positions, const at::Tensor& write,
                                         const at::Tensor& table, PagedKVCache* cache) const {
  TORCH_CHECK(!provider_, "generation needs resident weights, not a WeightProvider's");
  const int64_t S = ids.size(0), bs = cache->block_size;
  PagedState st;
  st.cache = cache;
  st.decode = true;
  st.write = write;
  st.table = table;
  st.max_blocks = table.size(1);
  st.starts.assign(S, 0);  // Unused by decode; sizes S.
  st.lengths.assign(S, 1);
  st.positions = positions;
  // On CUDA only: the CPU loops are the kernels' reference, not a fast path.
  st.decode_kernel = options_.fused_kernels && options_.device.is_cuda() &&
                     PagedDecodeSupported(options_.device, options_.dtype, config_.num_heads, config_.num_kv_heads,
                                          config_.head_dim, bs);
  if (!st.decode_kernel) {
    // Keys at or past each sequence's length are padding: -inf.
    at::Tensor len = positions.unsqueeze(1) + 1;                                                   // [S,1]
    at::Tensor pad = at::arange(st.max_blocks * bs, positions.options()).unsqueeze(0).ge(len);  // [S,L]
    st.bias = at::zeros(pad.sizes(), positions.options().dtype(options_.dtype))
                  .masked_fill_(pad, -std::numeric_limits<float>::infinity())
                  .repeat({config_.num_kv_heads, 1})
                  .unsqueeze(1);  // [kvh*S,1,L]
  }
  auto [cos, sin] = Rope(positions.unsqueeze(1));       // [S,1,1,D]
  at::Tensor x = at::embedding(root_.embed, ids.unsqueeze(1));  // [S,1,H]
  for (int l = 0; l < config_.num_layers; ++l) {
    x = BlockForward(layers_[l], x, cos, sin, nullptr, l, {}, nullptr, {}, &st);
  }
  return Norm(x.squeeze(1), root_.final_norm);  // [S,H]
}

at::Tensor Transformer::PagedForward(const std::vector<int64_t>& ids, const PagedBatch& batch,
                                     PagedKVCache* cache) const {
  TORCH_CHECK(!provider_, "generation needs resident weights, not a WeightProvider's");
  const int64_t S = static_cast<int64_t>(batch.starts.size()), N = static_cast<int64_t>(ids.size());
  const int64_t bs = cache->block_size;
  TORCH_CHECK(S > 0 && batch.lengths.size() == static_cast<size_t>(S) &&
                  batch.block_tables.size() == static_cast<size_t>(S),
              "PagedForward: starts, lengths and block tables must have one entry per sequence");
  PagedState st;
  st.cache = cache;
  st.starts = batch.starts;
  st.lengths = batch.lengths;
  st.decode = true;
  int64_t total = 0;
  for (int64_t i = 0; i < S; ++i) {
    const int64_t end = batch.starts[i] + batch.lengths[i];
    TORCH_CHECK(batch.lengths[i] > 0, "PagedForward: sequence ", i, " has no new tokens");
    TORCH_CHECK(static_cast<int64_t>(batch.block_tables[i].size()) * bs >= end, "PagedForward: sequence ", i,
                "'s block table covers fewer than ", end, " positions");
    st.decode &= batch.lengths[i] == 1;
    st.max_blocks = std::max(st.max_blocks, (end + bs - 1) / bs);
    total += batch.lengths[i];
  }
  TORCH_CHECK(total == N, "PagedForward: ", N, " ids for ", total, " new tokens");
  // Host-side index arithmetic, then one copy to the device:
  // [ids N | positions N | write slots N | table S*max_blocks | last S].
  std::vector<int64_t> packed(ids);
  packed.resize(3 * N + S * st.max_blocks + S, 0);
  int64_t t = 0;
  for (int64_t i = 0; i < S; ++i) {
    const auto& table = batch.block_tables[i];
    for (int64_t j = 0; j < batch.lengths[i]; ++j, ++t) {
      const int64_t p = batch.starts[i] + j;
      packed[N + t] = p;
      packed[2 * N + t] = table[p / bs] * bs + p % bs;
    }
    const int64_t used = std::min<int64_t>(static_cast<int64_t>(table.size()), st.max_blocks);
    for (int64_t j = 0; j < used; ++j) packed[3 * N + i * st.max_blocks + j] = table[j];
    packed[3 * N + S * st.max_blocks + i] = t - 1;
  }
  const at::Device device = options_.device;
  at::Tensor dev = at::tensor(packed, at::kLong).to(device);
  at::Tensor id_t = dev.narrow(0, 0, N), pos = dev.narrow(0, N, N);
  st.write = dev.narrow(0, 2 * N, N);
  st.table = dev.narrow(0, 3 * N, S * st.max_blocks).view({S, st.max_blocks});
  at::Tensor last = dev.narrow(0, 3 * N + S * st.max_blocks, S);
  at::Tensor x, cos, sin;
  if (st.decode) {
    return HeadLogits(PagedDecodeHidden(id_t, pos, st.write, st.table, cache));  // Rows are the sequences.
  } else {
    st.masks.resize(S);
    for (int64_t i = 0; i < S; ++i) {
      const int64_t s = batch.starts[i], n = batch.lengths[i];
      if (s == 0) continue;
      at::Tensor key = at::arange(s + n, dev.options()).unsqueeze(0);     // [1,s+n]
      at::Tensor query = at::arange(s, s + n, dev.options()).unsqueeze(1);  // [n,1]
      st.masks[i] = key.le(query);                                         // [n,s+n]
    }
    std::tie(cos, sin) = Rope(pos.unsqueeze(0));            // [1,1,N,D]
    x = at::embedding(root_.embed, id_t.unsqueeze(0));      // [1,N,H]
  }
  for (int l = 0; l < config_.num_layers; ++l) {
    x = BlockForward(layers_[l], x, cos, sin, nullptr, l, {}, nullptr, {}, &st);
  }
  at::Tensor final = x.reshape({N, x.size(-1)}).index_select(0, last);  // [S,H]
  return HeadLogits(Norm(final, root_.final_norm));
}

absl::StatusOr<ModelOptions> ModelOptionsFor(const std::string& device, const std::string& dtype) {
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
  return options;
}

}  // namespace kernelrl::learner
