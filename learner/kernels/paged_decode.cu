// CUDA side of paged_decode.h, on the tensor cores (WMMA). Memory-bound:
// every key and value row of a sequence's KV head is read once and serves
// all the query heads of its group. One thread block per (partition, KV
// head, sequence): keys and values stream from their cache blocks into
// shared memory by asynchronous copies, 32 keys a stage with the next stage
// in flight; the group's queries, padded to 16 rows, times 16 keys a tile;
// an exact softmax step per stage; then P times V on the tensor cores
// again, each warp owning output columns. A second kernel merges the
// partitions. Rules shared with the CPU loops: paged_decode_math.h.
#include "learner/kernels/paged_decode.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <atomic>

#include "learner/kernels/device_util.cuh"
#include "learner/kernels/paged_decode_math.h"

namespace kernelrl::learner::kernels {
namespace {

constexpr int kWarps = 4;

__device__ __forceinline__ float WarpSum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ float WarpMax(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

namespace wmma = nvcuda::wmma;
constexpr int kT = kDecodeTile;  // WMMA tile edge: 16 keys, 16 (padded) query rows.
constexpr int kChunk = 32;       // Keys per pipeline stage (two tiles).
constexpr int kStages = 2;       // Stages in shared memory: one in flight while one is used (a third
                                 // costs a block per SM: measured slower on H200).

// Asynchronous 16-byte copies global -> shared (no registers held while
// they fly), committed per stage and waited for by count.
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Shared memory of the tensor-core kernel; rows padded by 16 bytes so
// that the tiles' row starts fall in different banks.
template <typename T, int D>
struct TcSmem {
  static constexpr int kLdKv = D + 8, kLdQ = D + 8, kLdO = D + 4, kLdS = kChunk + 4, kLdP = kChunk + 8;
  static constexpr size_t kKv = kStages * 2 * kChunk * kLdKv * sizeof(T);  // [stage][K|V][key][D]
  static constexpr size_t kQ = kT * kLdQ * sizeof(T);
  static constexpr size_t kO = kT * kLdO * sizeof(float);
  static constexpr size_t kS = kT * kLdS * sizeof(float);
  static constexpr size_t kP = kT * kLdP * sizeof(T);
  static constexpr size_t kBytes = kKv + kQ + kO + kS + kP;
};

// Keys stream through shared memory in stages of kChunk (the next stage's
// copies in flight while this one is used): S = Q K^T on the tensor cores,
// an exact softmax step per query row, then O += P V with each warp owning
// output columns.
template <typename T, int D>
__global__ void __launch_bounds__(kWarps * 32)
    PagedDecodeTcKernel(const T* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc,
                        const int64_t* __restrict__ table, const int64_t* __restrict__ positions,
                        float* __restrict__ partial, float* __restrict__ stats, T* __restrict__ out,
                        PagedDecodeShape s) {
  using L = TcSmem<T, D>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* kv_s = reinterpret_cast<T*>(smem);
  T* q_s = reinterpret_cast<T*>(smem + L::kKv);
  float* o_s = reinterpret_cast<float*>(smem + L::kKv + L::kQ);
  float* s_s = reinterpret_cast<float*>(smem + L::kKv + L::kQ + L::kO);
  T* p_s = reinterpret_cast<T*>(smem + L::kKv + L::kQ + L::kO + L::kS);
  __shared__ float m_s[kT], l_s[kT];
  const int part = blockIdx.x, h = blockIdx.y;
  const int64_t seq = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, tid = threadIdx.x;
  const int G = s.heads / s.kv_heads;
  const KeyRange keys = PartitionRange(s.table_width * s.block_size, s.partitions, part, positions[seq]);
  const int64_t begin = keys.begin, end = keys.end;
  const int64_t* row = table + seq * s.table_width;
  const int64_t head_rows = int64_t{h} * s.cache_blocks * s.block_size;
  const int bs = static_cast<int>(s.block_size);

  // Copies of the whole tiles holding keys [c0, min(c0 + kChunk, end)) into
  // `stage`. A tile lies in one cache block, so each tile's first row is
  // looked up once; the rest is shifts and masks (keys < 2^31).
  auto issue = [&](int64_t c0, int stage) {
    constexpr int kPieces = D * static_cast<int>(sizeof(T)) / 16;  // 16-byte pieces per row.
    constexpr int kTiles = kChunk / kT;
    static_assert(kTiles == 2, "a stage is two tiles");
    const int n = static_cast<int>(end - c0 < kChunk ? end - c0 : kChunk);
    const int tiles = (n + kT - 1) / kT;
    int64_t first[kTiles];
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      const int tok = static_cast<int>(c0) + t * kT;
      first[t] = t < tiles ? head_rows + row[tok / bs] * s.block_size + tok % bs : 0;
    }
#pragma unroll
    for (int i = tid; i < 2 * kChunk * kPieces; i += kWarps * 32) {
      const int which = i / (kChunk * kPieces), r = (i / kPieces) % kChunk, pc = i % kPieces;
      if (r >= tiles * kT) continue;
      const int64_t base = r < kT ? first[0] : first[1];  // Registers, not an indexed array.
      const T* src = (which == 0 ? kc : vc) + (base + r % kT) * D + pc * (16 / sizeof(T));
      T* dst = kv_s + ((stage * 2 + which) * kChunk + r) * L::kLdKv + pc * (16 / sizeof(T));
      CpAsync16(dst, src);
    }
  };
  // Prologue: the first kStages - 1 stages in flight (a group per stage,
  // empty past the end, so that waiting by count stays exact).
  for (int i = 0; i < kStages - 1; ++i) {
    if (begin + i * kChunk < end) issue(begin + i * kChunk, i);
    CpAsyncCommit();
  }

  for (int i = tid; i < kT * D; i += kWarps * 32) {
    const int r = i / D, d = i % D;
    q_s[r * L::kLdQ + d] = r < G ? q[(seq * s.heads + h * G + r) * D + d] : FromF<T>(0.0f);
    o_s[r * L::kLdO + d] = 0.0f;
  }
  for (int i = tid; i < kT * kChunk; i += kWarps * 32) p_s[(i / kChunk) * L::kLdP + i % kChunk] = FromF<T>(0.0f);
  if (tid < kT) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.0f;
  }
  __syncthreads();
  wmma::fragment<wmma::matrix_a, kT, kT, kT, T, wmma::row_major> qa[D / kT];
#pragma unroll
  for (int k = 0; k < D / kT; ++k) wmma::load_matrix_sync(qa[k], q_s + k * kT, L::kLdQ);

  const float sl2 = s.scale * kLog2E;
  int stage = 0;
  for (int64_t c0 = begin; c0 < end; c0 += kChunk, stage = (stage + 1) % kStages) {
    const int64_t ahead = c0 + (kStages - 1) * kChunk;  // Into the stage freed last iteration.
    if (ahead < end) issue(ahead, (stage + kStages - 1) % kStages);
    CpAsyncCommit();
    CpAsyncWait<kStages - 1>();  // This stage's group is complete.
    __syncthreads();
    const T* k_s = kv_s + (stage * 2) * kChunk * L::kLdKv;
    const T* v_s = k_s + kChunk * L::kLdKv;
    const int n = static_cast<int>(end - c0 < kChunk ? end - c0 : kChunk);
    const int tiles = (n + kT - 1) / kT;
    for (int t = warp; t < tiles; t += kWarps) {  // Scores, a tile per warp.
      wmma::fragment<wmma::accumulator, kT, kT, kT, float> acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int k = 0; k < D / kT; ++k) {
        wmma::fragment<wmma::matrix_b, kT, kT, kT, T, wmma::col_major> kb;
        wmma::load_matrix_sync(kb, k_s + t * kT * L::kLdKv + k * kT, L::kLdKv);
        wmma::mma_sync(acc, qa[k], kb, acc);
      }
      wmma::store_matrix_sync(s_s + t * kT, acc, L::kLdS, wmma::mem_row_major);
    }
    __syncthreads();
    // Exact softmax step per query row (warp w: rows w, w + kWarps, ...),
    // and that row of the running output rescaled to the new max.
    for (int r = warp; r < G; r += kWarps) {
      const float x = lane < n ? s_s[r * L::kLdS + lane] * sl2 : -INFINITY;  // kChunk == 32: a key per lane.
      const float m_old = m_s[r], m_new = fmaxf(m_old, WarpMax(x));
      const T p = FromF<T>(lane < n ? exp2f(x - m_new) : 0.0f);
      p_s[r * L::kLdP + lane] = p;
      const float sum = WarpSum(ToF(p));
      const float corr = Rescale(m_old, m_new);
      for (int d = lane; d < D; d += 32) o_s[r * L::kLdO + d] *= corr;
      if (lane == 0) {
        l_s[r] = l_s[r] * corr + sum;
        m_s[r] = m_new;
      }
    }
    __syncthreads();
    for (int col = warp * kT; col < D; col += kWarps * kT) {  // O += P V.
      wmma::fragment<wmma::accumulator, kT, kT, kT, float> acc;
      wmma::load_matrix_sync(acc, o_s + col, L::kLdO, wmma::mem_row_major);
      for (int t = 0; t < tiles; ++t) {
        wmma::fragment<wmma::matrix_a, kT, kT, kT, T, wmma::row_major> pa;
        wmma::fragment<wmma::matrix_b, kT, kT, kT, T, wmma::row_major> vb;
        wmma::load_matrix_sync(pa, p_s + t * kT, L::kLdP);
        wmma::load_matrix_sync(vb, v_s + t * kT * L::kLdKv + col, L::kLdKv);
        wmma::mma_sync(acc, pa, vb, acc);
      }
      wmma::store_matrix_sync(o_s + col, acc, L::kLdO, wmma::mem_row_major);
    }
    __syncthreads();  // This stage's buffers are free for the next iteration's copies.
  }
  for (int i = tid; i < G * D; i += kWarps * 32) {
    const int r = i / D, d = i % D;
    const int64_t head = seq * s.heads + h * G + r;
    const float o = o_s[r * L::kLdO + d];
    if (s.partitions == 1) {
      out[head * D + d] = FromF<T>(l_s[r] > 0.0f ? o / l_s[r] : 0.0f);
    } else {
      const int64_t slot = head * s.partitions + part;
      partial[slot * D + d] = o;
      if (d == 0) {
        stats[2 * slot] = m_s[r];
        stats[2 * slot + 1] = l_s[r];
      }
    }
  }
}

// Launches the tensor-core kernel with its dynamic shared memory, opted in
// once per instantiation and device (from D = 128 on it is over the 48 KB
// default).
template <typename T, int D>
int LaunchTc(const T* q, const T* kc, const T* vc, const int64_t* table, const int64_t* positions, float* partial,
             float* stats, T* out, const PagedDecodeShape& s, dim3 grid, cudaStream_t stream) {
  static std::atomic<uint64_t> opted_in{0};  // Bit i: device i.
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return static_cast<int>(e);
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if ((opted_in.load() & bit) == 0 || bit == 0) {
    e = cudaFuncSetAttribute(PagedDecodeTcKernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(TcSmem<T, D>::kBytes));
    if (e != cudaSuccess) return static_cast<int>(e);
    opted_in.fetch_or(bit);
  }
  PagedDecodeTcKernel<T, D><<<grid, kWarps * 32, TcSmem<T, D>::kBytes, stream>>>(q, kc, vc, table, positions, partial,
                                                                                 stats, out, s);
  return 0;
}

// One warp per (sequence, query head): merges the partitions' states.
template <typename T, int EPL>
__global__ void __launch_bounds__(kWarps * 32)
    PagedDecodeMergeKernel(const float* __restrict__ partial, const float* __restrict__ stats, T* __restrict__ out,
                           int64_t rows, int partitions) {
  constexpr int D = EPL * 32;
  const int64_t head = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (head >= rows) return;
  const float* st = stats + head * partitions * 2;
  float m = -INFINITY;
  for (int p = 0; p < partitions; ++p) m = fmaxf(m, st[2 * p]);
  float l = 0.0f, a[EPL];
#pragma unroll
  for (int e = 0; e < EPL; ++e) a[e] = 0.0f;
  for (int p = 0; p < partitions; ++p) {
    const float r = Rescale(st[2 * p], m);
    if (r == 0.0f) continue;
    l += st[2 * p + 1] * r;
    const float* x = partial + (head * partitions + p) * D + lane * EPL;
#pragma unroll
    for (int e = 0; e < EPL; ++e) a[e] += x[e] * r;
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  Pack<T, EPL> o;
#pragma unroll
  for (int e = 0; e < EPL; ++e) o.v[e] = FromF<T>(a[e] * inv);
  Store<T, EPL>(out + head * D + lane * EPL, o);
}

template <typename T, int D>
int Launch(const void* q, const void* kc, const void* vc, const int64_t* table, const int64_t* positions,
           float* partial, float* stats, void* out, const PagedDecodeShape& s, cudaStream_t stream) {
  const dim3 grid(s.partitions, s.kv_heads, static_cast<unsigned>(s.seqs));
  const int code = LaunchTc<T, D>(static_cast<const T*>(q), static_cast<const T*>(kc), static_cast<const T*>(vc),
                                  table, positions, partial, stats, static_cast<T*>(out), s, grid, stream);
  if (code != 0) return code;
  if (s.partitions > 1) {
    const int64_t rows = s.seqs * s.heads;
    PagedDecodeMergeKernel<T, D / 32><<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), kWarps * 32, 0, stream>>>(
        partial, stats, static_cast<T*>(out), rows, s.partitions);
  }
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int ForHeadDim(const void* q, const void* kc, const void* vc, const int64_t* table, const int64_t* positions,
               float* partial, float* stats, void* out, const PagedDecodeShape& s, cudaStream_t stream) {
  switch (s.head_dim) {
    case 32: return Launch<T, 32>(q, kc, vc, table, positions, partial, stats, out, s, stream);
    case 64: return Launch<T, 64>(q, kc, vc, table, positions, partial, stats, out, s, stream);
    case 128: return Launch<T, 128>(q, kc, vc, table, positions, partial, stats, out, s, stream);
    case 256: return Launch<T, 256>(q, kc, vc, table, positions, partial, stats, out, s, stream);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace

int PagedDecodeAttention(DType dtype, const void* q, const void* k_cache, const void* v_cache, const int64_t* table,
                         const int64_t* positions, float* partial, float* stats, void* out,
                         const PagedDecodeShape& shape, void* stream) {
  if (!PagedDecodeSupported(shape.heads, shape.kv_heads, shape.head_dim, shape.block_size) || dtype == DType::kF32 ||
      shape.partitions < 1 || shape.seqs < 1 || shape.seqs > 65535) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  auto st = static_cast<cudaStream_t>(stream);
  if (dtype == DType::kBF16) {
    return ForHeadDim<__nv_bfloat16>(q, k_cache, v_cache, table, positions, partial, stats, out, shape, st);
  }
  return ForHeadDim<__half>(q, k_cache, v_cache, table, positions, partial, stats, out, shape, st);
}

}  // namespace kernelrl::learner::kernels
