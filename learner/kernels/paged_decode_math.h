// The split-key decode attention's rules, shared by the CUDA kernels
// (paged_decode.cu) and their CPU loops (learner/paged_decode.cc): which
// shapes the kernels take, how the keys are split into partitions, and how
// partial softmax states merge. Scores are kept in the base-2 domain
// (scaled by scale * log2 e), so every exponential is an exp2.
#ifndef KERNELRL_LEARNER_KERNELS_PAGED_DECODE_MATH_H_
#define KERNELRL_LEARNER_KERNELS_PAGED_DECODE_MATH_H_

#include <cmath>
#include <cstdint>

#include "learner/kernels/fused_math.h"

namespace kernelrl::learner::kernels {

// Query heads of one KV head: padded to one 16-row tensor-core tile.
constexpr int kDecodeMaxGroup = 16;
// Keys per partition at least: below this the merge costs more than the
// parallelism gains.
constexpr int64_t kDecodeMinPartitionKeys = 64;
constexpr float kLog2E = 1.4426950408889634f;
// Keys of one tensor-core tile: partitions start on its multiples, and a
// block size that is one too keeps a tile inside one cache block.
constexpr int64_t kDecodeTile = 16;

// The shapes the kernels take (and the CPU loops, for the same coverage):
// a group of at most 16 query heads per KV head, a head size of 32, 64, 128
// or 256, cache blocks of a multiple of 16 keys. Element types: bf16 and
// fp16 on CUDA, fp32 on the CPU (learner/paged_decode.h).
KRL_HD bool PagedDecodeSupported(int heads, int kv_heads, int head_dim, int64_t block_size) {
  return kv_heads > 0 && heads % kv_heads == 0 && heads / kv_heads <= kDecodeMaxGroup &&
         (head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256) && block_size > 0 &&
         block_size % kDecodeTile == 0;
}

// Partitions per (sequence, KV head): enough thread blocks to fill the GPU
// twice over (`units`: its multiprocessors; four times over measured no
// better on an H200), each partition at least kDecodeMinPartitionKeys of
// the table's max_keys. A function of the shapes only, so a CUDA graph
// captured once stays valid.
KRL_HD int PagedDecodePartitions(int64_t seqs, int kv_heads, int64_t max_keys, int units) {
  const int64_t blocks = seqs * kv_heads;
  int64_t want = (2 * int64_t{units} + blocks - 1) / blocks;
  const int64_t most = (max_keys + kDecodeMinPartitionKeys - 1) / kDecodeMinPartitionKeys;
  if (want > most) want = most;
  return want < 1 ? 1 : static_cast<int>(want);
}

// Keys per partition, a multiple of kDecodeTile (the last partition may be
// short or empty).
KRL_HD int64_t PartitionKeys(int64_t max_keys, int partitions) {
  const int64_t keys = (max_keys + partitions - 1) / partitions;
  return (keys + kDecodeTile - 1) / kDecodeTile * kDecodeTile;
}

// The keys [begin, end) that partition `part` of a sequence attends over,
// its query at `position` (keys [0, position], at most max_keys); empty
// (end <= begin) past the sequence's end.
struct KeyRange {
  int64_t begin, end;
};

KRL_HD KeyRange PartitionRange(int64_t max_keys, int partitions, int part, int64_t position) {
  const int64_t len = position + 1 < max_keys ? position + 1 : max_keys;
  const int64_t chunk = PartitionKeys(max_keys, partitions);
  const int64_t begin = part * chunk;
  return {begin, begin + chunk < len ? begin + chunk : len};
}

// Online softmax state of one query head over some keys: running max m
// (base 2), sum l of 2^(s - m); the weighted values live beside it.
struct SoftmaxState {
  float m;
  float l;
};

KRL_HD SoftmaxState SoftmaxEmpty() { return {-INFINITY, 0.0f}; }

// Weight of a state with max m under a new max (0 for an empty state).
KRL_HD float Rescale(float m, float new_max) { return m == -INFINITY ? 0.0f : exp2f(m - new_max); }

}  // namespace kernelrl::learner::kernels

#endif  // KERNELRL_LEARNER_KERNELS_PAGED_DECODE_MATH_H_
