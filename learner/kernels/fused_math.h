// Per-element math of the learner's fused kernels, shared by the CUDA
// kernels (fused_kernels.cu) and their CPU loops (learner/fused_ops.cc), so
// the CPU tests in CI check the same formulas and index maps the GPU runs.
// All in fp32.
#ifndef KERNELRL_LEARNER_KERNELS_FUSED_MATH_H_
#define KERNELRL_LEARNER_KERNELS_FUSED_MATH_H_

#include <cmath>
#include <cstdint>

#include "learner/kernels/fused_kernels.h"

#ifdef __CUDACC__
#define KRL_HD __host__ __device__ __forceinline__
#else
#define KRL_HD inline
#endif

namespace kernelrl::learner::kernels {

// RoPE on one (i, i + D/2) pair, as transformers' x*cos + rotate_half(x)*sin
// with rotate_half(x) = [-x2, x1]:
//   y1 = x1*c1 - x2*s1,  y2 = x2*c2 + x1*s2.
KRL_HD void RopePair(float x1, float x2, float c1, float s1, float c2, float s2, float* y1, float* y2) {
  *y1 = x1 * c1 - x2 * s1;
  *y2 = x2 * c2 + x1 * s2;
}

// Its transpose (backward): dx1 = dy1*c1 + dy2*s2,  dx2 = dy2*c2 - dy1*s1.
KRL_HD void RopePairGrad(float dy1, float dy2, float c1, float s1, float c2, float s2, float* dx1, float* dx2) {
  *dx1 = dy1 * c1 + dy2 * s2;
  *dx2 = dy2 * c2 - dy1 * s1;
}

// Flat index -> (row n, head hh, pair j) of RoPE + split. Heads [0, nh)
// are q, [nh, nh+kvh) k (both rotated), the rest v (copied); `part` (0, 1,
// 2) and `offset` locate the head's row in q, k or v ([B, heads, T, D]).
struct RopeSite {
  int64_t n, offset;
  int hh, j, part;
  bool rotate;
};

// How many (row, head, pair) sites RoPE + split has: its flat index range.
KRL_HD int64_t RopePairs(const RopeShape& s) {
  return s.batch * s.seq * (s.heads + 2 * s.kv_heads) * (s.head_dim / 2);
}

KRL_HD RopeSite Locate(int64_t idx, const RopeShape& s) {
  const int half = s.head_dim / 2, heads = s.heads + 2 * s.kv_heads;
  RopeSite r;
  r.j = idx % half;
  r.hh = (idx / half) % heads;
  r.n = idx / (int64_t{half} * heads);
  const int64_t b = r.n / s.seq, t = r.n % s.seq;
  int h = r.hh, per_batch = s.heads;
  r.part = 0;
  if (h >= s.heads) {
    h -= s.heads;
    per_batch = s.kv_heads;
    r.part = 1;
    if (h >= s.kv_heads) {
      h -= s.kv_heads;
      r.part = 2;
    }
  }
  r.rotate = r.part < 2;
  r.offset = ((b * per_batch + h) * s.seq + t) * s.head_dim;
  return r;
}

KRL_HD float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// SwiGLU: y = silu(g) * u.
KRL_HD float SwiGlu(float g, float u) { return g * Sigmoid(g) * u; }

// d/dg and d/du of silu(g)*u times dy; silu'(g) = s * (1 + g * (1 - s)).
KRL_HD void SwiGluGrad(float g, float u, float dy, float* dg, float* du) {
  const float s = Sigmoid(g);
  *du = dy * g * s;
  *dg = dy * u * s * (1.0f + g * (1.0f - s));
}

// Online log-sum-exp state: running max m and sum s of exp(z - m).
struct LseState {
  float m;
  float s;
};

KRL_HD LseState LseEmpty() { return {-INFINITY, 0.0f}; }

KRL_HD void LseAdd(LseState* st, float z) {
  if (z > st->m) {
    st->s = st->s * expf(st->m - z) + 1.0f;
    st->m = z;
  } else {
    st->s += expf(z - st->m);
  }
}

KRL_HD LseState LseMerge(LseState a, LseState b) {
  if (b.m == -INFINITY) return a;
  if (a.m == -INFINITY) return b;
  const float m = a.m > b.m ? a.m : b.m;
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

KRL_HD float LseValue(LseState st) { return st.m + logf(st.s); }

// d logp[t] / d logit[c], with z = logit * inv_temp and upstream g:
//   inv_temp * g * ([c == t] - exp(z - lse)).
KRL_HD float LogprobGrad(float z, float lse, float g, float inv_temp, bool is_target) {
  return inv_temp * g * ((is_target ? 1.0f : 0.0f) - expf(z - lse));
}

}  // namespace kernelrl::learner::kernels

#endif  // KERNELRL_LEARNER_KERNELS_FUSED_MATH_H_
