// Decode attention over the paged KV cache (learner/kernels/paged_decode.h):
// q [S, heads, D] of one new token per sequence, keys and values read from
// the cache through each sequence's block table, out [S, heads, D]. CUDA
// tensors (bf16, fp16) run the tensor-core kernels; CPU tensors (fp32) run
// loops with the same partitions and merge rule, so CI checks them against
// plain attention.
#ifndef KERNELRL_LEARNER_PAGED_DECODE_H_
#define KERNELRL_LEARNER_PAGED_DECODE_H_

#include <ATen/ATen.h>

namespace kernelrl::learner {

// Whether PagedDecodeAttention takes a model of this shape
// (kernels::PagedDecodeSupported) in this dtype on this device: bf16 or
// fp16 on CUDA, fp32 on the CPU.
bool PagedDecodeSupported(at::Device device, at::ScalarType dtype, int64_t heads, int64_t kv_heads, int64_t head_dim,
                          int64_t block_size);
// The same for q [S, heads, D] (at most 65535 sequences on CUDA).
bool PagedDecodeSupported(const at::Tensor& q, int64_t kv_heads, int64_t block_size);

// k_cache, v_cache [kv_heads, blocks, block_size, D]; table int64
// [S, width] block ids; positions int64 [S]: each sequence attends over
// its keys [0, positions[i]] (at most width * block_size). `partitions`
// overrides the split over the keys (0: the device's choice,
// kernels::PagedDecodePartitions).
at::Tensor PagedDecodeAttention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                                const at::Tensor& table, const at::Tensor& positions, double scale,
                                int partitions = 0);

}  // namespace kernelrl::learner

#endif  // KERNELRL_LEARNER_PAGED_DECODE_H_
