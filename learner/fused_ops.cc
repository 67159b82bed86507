#include "learner/fused_ops.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "learner/kernels/fused_kernels.h"
#include "learner/kernels/fused_math.h"

namespace kernelrl::learner {
namespace {

namespace k = kernels;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void* Stream(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

void Check(int code, const char* what) { TORCH_CHECK(code == 0, what, ": ", k::ErrorString(code)); }

void CheckCpuFloat(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.scalar_type() == at::kFloat, what, ": the CPU path is fp32 only, got ", t.scalar_type());
}

// ---- RoPE + split -----------------------------------------------------------

// CPU loops over the same flat index map as the CUDA kernels (Locate).
void RopeSplitForwardCpu(const float* qkv, const float* cos, const float* sin, float* const split[3],
                         const k::RopeShape& s) {
  const int D = s.head_dim, half = D / 2, heads = s.heads + 2 * s.kv_heads;
  for (int64_t idx = 0; idx < k::RopePairs(s); ++idx) {
    const k::RopeSite r = k::Locate(idx, s);
    const float* x = qkv + r.n * heads * D + int64_t{r.hh} * D;
    float y1 = x[r.j], y2 = x[r.j + half];
    const float *c = cos + r.n * D, *sn = sin + r.n * D;
    if (r.rotate) k::RopePair(y1, y2, c[r.j], sn[r.j], c[r.j + half], sn[r.j + half], &y1, &y2);
    split[r.part][r.offset + r.j] = y1;
    split[r.part][r.offset + r.j + half] = y2;
  }
}

void RopeSplitBackwardCpu(const float* const dsplit[3], const float* cos, const float* sin, float* dqkv,
                          const k::RopeShape& s) {
  const int D = s.head_dim, half = D / 2, heads = s.heads + 2 * s.kv_heads;
  for (int64_t idx = 0; idx < k::RopePairs(s); ++idx) {
    const k::RopeSite r = k::Locate(idx, s);
    const float* dy = dsplit[r.part] + r.offset;
    float d1 = dy[r.j], d2 = dy[r.j + half];
    const float *c = cos + r.n * D, *sn = sin + r.n * D;
    if (r.rotate) k::RopePairGrad(d1, d2, c[r.j], sn[r.j], c[r.j + half], sn[r.j + half], &d1, &d2);
    float* dx = dqkv + r.n * heads * D + int64_t{r.hh} * D;
    dx[r.j] = d1;
    dx[r.j + half] = d2;
  }
}

class RopeSplitFn : public torch::autograd::Function<RopeSplitFn> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& qkv_in, const at::Tensor& cos_in,
                               const at::Tensor& sin_in, int64_t heads, int64_t kv_heads, int64_t head_dim) {
    at::Tensor qkv = qkv_in.contiguous(), cos = cos_in.contiguous(), sin = sin_in.contiguous();
    TORCH_CHECK(qkv.dim() == 3 && qkv.size(2) == (heads + 2 * kv_heads) * head_dim && head_dim % 2 == 0,
                "FusedRopeSplit: qkv ", qkv.sizes(), " does not match heads ", heads, "+2*", kv_heads, " x ", head_dim);
    TORCH_CHECK(cos.numel() == qkv.size(0) * qkv.size(1) * head_dim && cos.sizes() == sin.sizes() &&
                    cos.scalar_type() == qkv.scalar_type(),
                "FusedRopeSplit: cos/sin ", cos.sizes(), " ", cos.scalar_type(), " do not match qkv");
    const k::RopeShape s{qkv.size(0), qkv.size(1), static_cast<int>(heads), static_cast<int>(kv_heads),
                         static_cast<int>(head_dim)};
    at::Tensor q = at::empty({s.batch, heads, s.seq, head_dim}, qkv.options());
    at::Tensor kk = at::empty({s.batch, kv_heads, s.seq, head_dim}, qkv.options());
    at::Tensor v = at::empty({s.batch, kv_heads, s.seq, head_dim}, qkv.options());
    if (qkv.is_cuda()) {
      c10::cuda::CUDAGuard guard(qkv.device());
      Check(k::RopeSplitForward(KernelDType(qkv), qkv.data_ptr(), cos.data_ptr(), sin.data_ptr(), q.data_ptr(),
                                kk.data_ptr(), v.data_ptr(), s, Stream(qkv)),
            "RoPE forward kernel");
    } else {
      CheckCpuFloat(qkv, "FusedRopeSplit");
      float* const split[3] = {q.data_ptr<float>(), kk.data_ptr<float>(), v.data_ptr<float>()};
      RopeSplitForwardCpu(qkv.data_ptr<float>(), cos.data_ptr<float>(), sin.data_ptr<float>(), split, s);
    }
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["shape"] = std::vector<int64_t>{s.batch, s.seq, heads, kv_heads, head_dim};
    return {q, kk, v};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto dims = ctx->saved_data["shape"].toIntVector();
    const k::RopeShape s{dims[0], dims[1], static_cast<int>(dims[2]), static_cast<int>(dims[3]),
                         static_cast<int>(dims[4])};
    const at::Tensor& cos = saved[0];
    // An output that did not reach the loss has no gradient: zeros.
    const std::vector<int64_t> heads = {dims[2], dims[3], dims[3]};
    for (int i = 0; i < 3; ++i) {
      grads[i] = grads[i].defined() ? grads[i].contiguous()
                                    : at::zeros({s.batch, heads[i], s.seq, s.head_dim}, cos.options());
    }
    at::Tensor dqkv = at::empty({s.batch, s.seq, (s.heads + 2 * s.kv_heads) * s.head_dim}, cos.options());
    if (cos.is_cuda()) {
      c10::cuda::CUDAGuard guard(cos.device());
      Check(k::RopeSplitBackward(KernelDType(cos), grads[0].data_ptr(), grads[1].data_ptr(), grads[2].data_ptr(),
                                 cos.data_ptr(), saved[1].data_ptr(), dqkv.data_ptr(), s, Stream(cos)),
            "RoPE backward kernel");
    } else {
      const float* const dsplit[3] = {grads[0].data_ptr<float>(), grads[1].data_ptr<float>(),
                                      grads[2].data_ptr<float>()};
      RopeSplitBackwardCpu(dsplit, cos.data_ptr<float>(), saved[1].data_ptr<float>(), dqkv.data_ptr<float>(), s);
    }
    return {dqkv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// ---- SwiGLU -----------------------------------------------------------------

class SwiGluFn : public torch::autograd::Function<SwiGluFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gu_in) {
    at::Tensor gu = gu_in.contiguous();
    TORCH_CHECK(gu.dim() >= 1 && gu.size(-1) % 2 == 0, "FusedSwiGlu: last dim of ", gu.sizes(), " is not even");
    const int64_t inter = gu.size(-1) / 2, rows = inter == 0 ? 0 : gu.numel() / (2 * inter);
    std::vector<int64_t> out_shape = gu.sizes().vec();
    out_shape.back() = inter;
    at::Tensor y = at::empty(out_shape, gu.options());
    if (gu.is_cuda()) {
      c10::cuda::CUDAGuard guard(gu.device());
      Check(k::SwiGluForward(KernelDType(gu), gu.data_ptr(), y.data_ptr(), rows, inter, Stream(gu)),
            "SwiGLU forward kernel");
    } else {
      CheckCpuFloat(gu, "FusedSwiGlu");
      const float* x = gu.data_ptr<float>();
      float* out = y.data_ptr<float>();
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < inter; ++c) out[r * inter + c] = k::SwiGlu(x[r * 2 * inter + c], x[r * 2 * inter + inter + c]);
      }
    }
    ctx->save_for_backward({gu});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor gu = ctx->get_saved_variables()[0];
    at::Tensor dy = grads[0].contiguous();
    const int64_t inter = gu.size(-1) / 2, rows = inter == 0 ? 0 : gu.numel() / (2 * inter);
    at::Tensor dgu = at::empty_like(gu);
    if (gu.is_cuda()) {
      c10::cuda::CUDAGuard guard(gu.device());
      Check(k::SwiGluBackward(KernelDType(gu), gu.data_ptr(), dy.data_ptr(), dgu.data_ptr(), rows, inter, Stream(gu)),
            "SwiGLU backward kernel");
    } else {
      const float* x = gu.data_ptr<float>();
      const float* d = dy.data_ptr<float>();
      float* out = dgu.data_ptr<float>();
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < inter; ++c) {
          const int64_t g = r * 2 * inter + c, u = g + inter;
          k::SwiGluGrad(x[g], x[u], d[r * inter + c], &out[g], &out[u]);
        }
      }
    }
    return {dgu};
  }
};

// ---- token log-probs --------------------------------------------------------

constexpr int64_t kChunkRows = 4096;

void LogprobForwardRows(const at::Tensor& logits, const at::Tensor& targets, double inv_temp, at::Tensor logp,
                        at::Tensor lse) {
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  if (logits.is_cuda()) {
    Check(k::LogprobForward(KernelDType(logits), logits.data_ptr(), logits.stride(0), targets.data_ptr<int64_t>(),
                            static_cast<float>(inv_temp), logp.data_ptr<float>(), lse.data_ptr<float>(), rows, vocab,
                            Stream(logits)),
          "log-prob forward kernel");
    return;
  }
  CheckCpuFloat(logits, "FusedTokenLogprobs");
  const float it = static_cast<float>(inv_temp);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data_ptr<float>() + r * logits.stride(0);
    k::LseState st = k::LseEmpty();
    for (int64_t c = 0; c < vocab; ++c) k::LseAdd(&st, row[c] * it);
    const float value = k::LseValue(st);
    const int64_t t = targets.data_ptr<int64_t>()[r];
    TORCH_CHECK(t < vocab, "FusedTokenLogprobs: target id ", t, " >= vocabulary ", vocab);
    lse.data_ptr<float>()[r] = value;
    logp.data_ptr<float>()[r] = t < 0 ? 0.0f : row[t] * it - value;
  }
}

// logits -> d logp / d logits * g, in place.
void LogprobBackwardRows(at::Tensor logits, const at::Tensor& targets, const at::Tensor& lse, const at::Tensor& g,
                         double inv_temp) {
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  if (logits.is_cuda()) {
    Check(k::LogprobBackward(KernelDType(logits), logits.data_ptr(), logits.stride(0), targets.data_ptr<int64_t>(),
                             lse.data_ptr<float>(), g.data_ptr<float>(), static_cast<float>(inv_temp),
                             logits.data_ptr(), rows, vocab, Stream(logits)),
          "log-prob backward kernel");
    return;
  }
  const float it = static_cast<float>(inv_temp);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = logits.data_ptr<float>() + r * logits.stride(0);
    const float l = lse.data_ptr<float>()[r], gr = g.data_ptr<float>()[r];
    const int64_t t = targets.data_ptr<int64_t>()[r];
    for (int64_t c = 0; c < vocab; ++c) row[c] = k::LogprobGrad(row[c] * it, l, gr, it, c == t);
  }
}

class TokenLogprobsFn : public torch::autograd::Function<TokenLogprobsFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden_in, const at::Tensor& weight,
                            const at::Tensor& targets_in, double inv_temp, int64_t keep_bytes) {
    at::Tensor hidden = hidden_in.contiguous();
    at::Tensor targets = targets_in.to(at::kLong).contiguous();
    const int64_t n = hidden.size(0), vocab = weight.size(0);
    TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1) &&
                    targets.numel() == n,
                "FusedTokenLogprobs: hidden ", hidden.sizes(), ", weight ", weight.sizes(), ", targets ",
                targets.sizes(), " do not fit");
    c10::OptionalDeviceGuard guard(hidden.device());
    at::Tensor logp = at::empty({n}, hidden.options().dtype(at::kFloat));
    at::Tensor lse = at::empty({n}, hidden.options().dtype(at::kFloat));
    const bool keep = n * vocab * static_cast<int64_t>(hidden.element_size()) <= keep_bytes;
    const int64_t chunk = keep ? std::max<int64_t>(n, 1) : kChunkRows;
    for (int64_t s = 0; s < n; s += chunk) {
      const int64_t len = std::min(chunk, n - s);
      at::Tensor logits = at::mm(hidden.narrow(0, s, len), weight.t());
      LogprobForwardRows(logits, targets.narrow(0, s, len), inv_temp, logp.narrow(0, s, len),
                         lse.narrow(0, s, len));
      if (keep) ctx->saved_data["logits"] = logits;
    }
    ctx->save_for_backward({hidden, weight, targets, lse});
    ctx->saved_data["inv_temp"] = inv_temp;
    return logp;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &hidden = saved[0], &weight = saved[1], &targets = saved[2], &lse = saved[3];
    const double inv_temp = ctx->saved_data["inv_temp"].toDouble();
    c10::OptionalDeviceGuard guard(hidden.device());
    // Ignored positions (target < 0) pass no gradient.
    at::Tensor g = (grad_out[0].to(at::kFloat) * targets.ge(0).to(at::kFloat)).contiguous();
    const int64_t n = hidden.size(0);
    at::Tensor kept;  // The forward's logits, overwritten here: a second backward recomputes.
    if (ctx->saved_data.count("logits")) {
      kept = ctx->saved_data["logits"].toTensor();
      ctx->saved_data.erase("logits");
    }
    const int64_t chunk = kept.defined() ? std::max<int64_t>(n, 1) : kChunkRows;
    at::Tensor grad_h = ctx->needs_input_grad(0) ? at::empty_like(hidden) : at::Tensor();
    at::Tensor grad_w;
    for (int64_t s = 0; s < n; s += chunk) {
      const int64_t len = std::min(chunk, n - s);
      at::Tensor h = hidden.narrow(0, s, len);
      at::Tensor d = kept.defined() ? kept : at::mm(h, weight.t());
      LogprobBackwardRows(d, targets.narrow(0, s, len), lse.narrow(0, s, len), g.narrow(0, s, len), inv_temp);
      if (grad_h.defined()) {
        at::Tensor out = grad_h.narrow(0, s, len);
        at::mm_out(out, d, weight);
      }
      if (ctx->needs_input_grad(1)) {
        if (!grad_w.defined()) {
          grad_w = at::mm(d.t(), h);
        } else {
          grad_w.addmm_(d.t(), h);
        }
      }
    }
    return {grad_h, grad_w, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

std::vector<at::Tensor> FusedRopeSplit(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                                       RopeSplitShape shape) {
  return RopeSplitFn::apply(qkv, cos, sin, shape.heads, shape.kv_heads, shape.head_dim);
}

at::Tensor FusedSwiGlu(const at::Tensor& gu) { return SwiGluFn::apply(gu); }

at::Tensor FusedTokenLogprobs(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                              double inv_temp, int64_t keep_bytes) {
  return TokenLogprobsFn::apply(hidden, weight, targets, inv_temp, keep_bytes);
}

kernels::DType KernelDType(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return k::DType::kF32;
    case at::kBFloat16: return k::DType::kBF16;
    case at::kHalf: return k::DType::kF16;
    default: TORCH_CHECK(false, "learner kernels: unsupported dtype ", t.scalar_type());
  }
}

}  // namespace kernelrl::learner
