// Decode attention straight from the paged KV cache: one query token per
// sequence attends over its own blocks, read through its block table; no
// gather of the blocks into contiguous scratch. Split over the keys
// (flash-decoding): each (sequence, KV head, partition) is one thread
// block that reads each key and value row once for all the query heads of
// its group, keeps an online softmax, and writes a partial result; a
// second kernel merges the partitions. Plain C++ interface like
// fused_kernels.h; learner/paged_decode.h wraps it for ATen.
//
// Layouts (contiguous, row-major):
//   q, out       [S, heads, D]
//   k/v cache    [kv_heads, blocks, block_size, D]
//   table        int64 [S, table_width] block ids
//   positions    int64 [S]: the query's position; keys [0, position] count
//   partial      fp32 [S, heads, partitions, D], stats fp32 [S, heads,
//                partitions, 2] (scratch; unused with one partition)
#ifndef KERNELRL_LEARNER_KERNELS_PAGED_DECODE_H_
#define KERNELRL_LEARNER_KERNELS_PAGED_DECODE_H_

#include <cstdint>

#include "learner/kernels/fused_kernels.h"

namespace kernelrl::learner::kernels {

struct PagedDecodeShape {
  int64_t seqs;
  int heads, kv_heads, head_dim;
  int64_t table_width, block_size, cache_blocks;
  int partitions;  // PagedDecodePartitions(...)
  float scale;     // Softmax scale (1/sqrt(D)).
};

// Returns 0 or a cudaError_t value (ErrorString names it).
int PagedDecodeAttention(DType dtype, const void* q, const void* k_cache, const void* v_cache, const int64_t* table,
                         const int64_t* positions, float* partial, float* stats, void* out,
                         const PagedDecodeShape& shape, void* stream);

}  // namespace kernelrl::learner::kernels

#endif  // KERNELRL_LEARNER_KERNELS_PAGED_DECODE_H_
