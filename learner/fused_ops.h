// Differentiable fused ops of the training step (learner/kernels/): one
// kernel per pass where eager ATen needs several. On CUDA tensors they run
// the CUDA kernels; on CPU (fp32 only) loops with the same per-element math,
// so CI checks forward and backward against plain ATen autograd.
#ifndef KERNELRL_LEARNER_FUSED_OPS_H_
#define KERNELRL_LEARNER_FUSED_OPS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "learner/kernels/fused_kernels.h"

namespace kernelrl::learner {

// The learner kernels' element type of a tensor: fp32, bf16 or fp16 (any
// other is an error).
kernels::DType KernelDType(const at::Tensor& t);

struct RopeSplitShape {
  int heads, kv_heads, head_dim;
};

// qkv [B, T, (nh + 2*kvh) * D] (a linear layer's output) -> {q [B,nh,T,D],
// k [B,kvh,T,D], v [B,kvh,T,D]}, contiguous, RoPE applied to q and k with
// cos/sin [B, 1, T, D] (or any contiguous [B*T, D]). Gradient flows to qkv.
std::vector<at::Tensor> FusedRopeSplit(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                                       RopeSplitShape shape);

// gu [..., 2*I] = [gate | up] -> silu(gate) * up, [..., I].
at::Tensor FusedSwiGlu(const at::Tensor& gu);

// log softmax(hidden @ weight^T * inv_temp)[target] per row, fp32 [n];
// targets < 0 give 0 and no gradient. hidden [n, H], weight [V, H].
// The [n, V] logits are kept for backward when they fit in keep_bytes,
// else computed again chunk by chunk there (long sequences).
at::Tensor FusedTokenLogprobs(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                              double inv_temp, int64_t keep_bytes);

}  // namespace kernelrl::learner

#endif  // KERNELRL_LEARNER_FUSED_OPS_H_
