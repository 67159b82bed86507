// Fused element-wise kernels of the learner's training step: RoPE + q/k/v
// split, SwiGLU, and token log-probs (log-softmax + gather) with their
// backward passes. Plain C++ interface (no torch, no CUDA headers) so the
// .cu file builds with nvcc in seconds; learner/fused_ops.h wraps it for
// ATen and autograd.
//
// Layouts (all contiguous, row-major):
//   qkv  [N, (nh + 2*kvh) * D]   N = B*T rows, T-major within a batch row
//   cos, sin [N, D]              same dtype as qkv
//   q [B, nh, T, D], k and v [B, kvh, T, D]
//   gu [N, 2*I] (gate | up),  y [N, I]
//   logits [n, V] with row stride ld; targets int64 [n] (< 0: ignored);
//   logp, lse, g: fp32 [n]
// Every function launches on `stream` (a cudaStream_t) and returns 0 or a
// cudaError_t value; ErrorString() names it.
#ifndef KERNELRL_LEARNER_KERNELS_FUSED_KERNELS_H_
#define KERNELRL_LEARNER_KERNELS_FUSED_KERNELS_H_

#include <cstdint>

namespace kernelrl::learner::kernels {

enum class DType { kF32, kBF16, kF16 };

struct RopeShape {
  int64_t batch, seq;
  int heads, kv_heads, head_dim;
};

int RopeSplitForward(DType dtype, const void* qkv, const void* cos, const void* sin, void* q, void* k, void* v,
                     RopeShape shape, void* stream);
int RopeSplitBackward(DType dtype, const void* dq, const void* dk, const void* dv, const void* cos,
                      const void* sin, void* dqkv, RopeShape shape, void* stream);

int SwiGluForward(DType dtype, const void* gu, void* y, int64_t rows, int64_t inter, void* stream);
int SwiGluBackward(DType dtype, const void* gu, const void* dy, void* dgu, int64_t rows, int64_t inter,
                   void* stream);

int LogprobForward(DType dtype, const void* logits, int64_t ld, const int64_t* targets, float inv_temp,
                   float* logp, float* lse, int64_t rows, int64_t vocab, void* stream);
// dlogits may alias logits (the backward pass overwrites them in place).
int LogprobBackward(DType dtype, const void* logits, int64_t ld, const int64_t* targets, const float* lse,
                    const float* g, float inv_temp, void* dlogits, int64_t rows, int64_t vocab, void* stream);

const char* ErrorString(int code);

}  // namespace kernelrl::learner::kernels

#endif  // KERNELRL_LEARNER_KERNELS_FUSED_KERNELS_H_
