// CUDA side of paged_decode.h. Memory-bound: every key and value row of a
// sequence's KV head is read once and serves all the query heads of its
// group. Two kernels of one thread block per (partition, KV head,
// sequence):
//  - bf16/fp16 with a block size that is a multiple of 16 (the engine's):
//    tensor cores (WMMA). The group's queries, padded to 16 rows, times 16
//    keys at a time read straight from their cache block; a chunk's scores
//    go through shared memory for an exact softmax step, then P times V on
//    the tensor cores again, each warp owning some output columns;
//  - otherwise (fp32, other block sizes): CUDA cores. Each warp walks its
//    share of the keys kUnroll rows at a time, scores them against the
//    queries held in registers (a warp-wide dot product per row) and folds
//    them into per-head online softmax states; the warps then merge through
//    shared memory.
// Rules shared with the CPU loops: paged_decode_math.h.
#include "learner/kernels/paged_decode.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include "learner/kernels/device_util.cuh"
#include "learner/kernels/paged_decode_math.h"

namespace kernelrl::learner::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kUnroll = 4;
constexpr int kG = kDecodeMaxGroup;

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

template <typename T, int EPL>
__device__ __forceinline__ void LoadRow(const T* p, float* out) {
  const Pack<T, EPL> x = Load<T, EPL>(p);
#pragma unroll
  for (int e = 0; e < EPL; ++e) out[e] = ToF(x.v[e]);
}

// One thread block per (partition, KV head, sequence). EPL = D / 32
// elements of each row per lane.
template <typename T, int EPL>
__global__ void __launch_bounds__(kWarps * 32)
    PagedDecodeKernel(const T* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc,
                      const int64_t* __restrict__ table, const int64_t* __restrict__ positions,
                      float* __restrict__ partial, float* __restrict__ stats, T* __restrict__ out,
                      PagedDecodeShape s) {
  constexpr int D = EPL * 32;
  const int part = blockIdx.x, h = blockIdx.y;
  const int64_t seq = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int G = s.heads / s.kv_heads;
  const int64_t max_keys = s.table_width * s.block_size;
  const int64_t chunk = PartitionKeys(max_keys, s.partitions);
  int64_t len = positions[seq] + 1;
  if (len > max_keys) len = max_keys;
  const int64_t begin = part * chunk;
  const int64_t end = begin + chunk < len ? begin + chunk : len;

  float qr[kG][EPL];
  const float qscale = s.scale * kLog2E;
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    if (g < G) {
      LoadRow<T, EPL>(q + ((seq * s.heads) + h * G + g) * D + lane * EPL, qr[g]);
#pragma unroll
      for (int e = 0; e < EPL; ++e) qr[g][e] *= qscale;
    }
  }
  SoftmaxState st[kG];
  float acc[kG][EPL];
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    st[g] = SoftmaxEmpty();
#pragma unroll
    for (int e = 0; e < EPL; ++e) acc[g][e] = 0.0f;
  }

  const int64_t* row = table + seq * s.table_width;
  const int64_t head_rows = int64_t{h} * s.cache_blocks * s.block_size;
  for (int64_t t0 = begin + warp * kUnroll; t0 < end; t0 += kWarps * kUnroll) {
    float kr[kUnroll][EPL], vr[kUnroll][EPL];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t t = t0 + u;
      if (t < end) {
        const int64_t off = (head_rows + row[t / s.block_size] * s.block_size + t % s.block_size) * D + lane * EPL;
        LoadRow<T, EPL>(kc + off, kr[u]);
        LoadRow<T, EPL>(vc + off, vr[u]);
      } else {
#pragma unroll
        for (int e = 0; e < EPL; ++e) kr[u][e] = vr[u][e] = 0.0f;
      }
    }
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      if (g >= G) continue;
      float sc[kUnroll];
      float mx = st[g].m;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < EPL; ++e) d += qr[g][e] * kr[u][e];
        d = WarpSum(d);
        sc[u] = t0 + u < end ? d : -INFINITY;
        mx = fmaxf(mx, sc[u]);
      }
      const float corr = Rescale(st[g].m, mx);  // mx is finite: row t0 exists.
      st[g].l *= corr;
#pragma unroll
      for (int e = 0; e < EPL; ++e) acc[g][e] *= corr;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float p = exp2f(sc[u] - mx);  // 0 for the rows past `end`.
        st[g].l += p;
#pragma unroll
        for (int e = 0; e < EPL; ++e) acc[g][e] += p * vr[u][e];
      }
      st[g].m = mx;
    }
  }

  // Merge the warps' states: each writes its own, then warp w merges head w
  // (and w + kWarps) across them.
  __shared__ float sm_m[kWarps][kG], sm_l[kWarps][kG];
  __shared__ float sm_acc[kWarps][kG][D];
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    if (g >= G) continue;
    if (lane == 0) {
      sm_m[warp][g] = st[g].m;
      sm_l[warp][g] = st[g].l;
    }
#pragma unroll
    for (int e = 0; e < EPL; ++e) sm_acc[warp][g][lane * EPL + e] = acc[g][e];
  }
  __syncthreads();
  for (int g = warp; g < G; g += kWarps) {
    float m = -INFINITY;
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, sm_m[w][g]);
    float l = 0.0f, a[EPL];
#pragma unroll
    for (int e = 0; e < EPL; ++e) a[e] = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float r = Rescale(sm_m[w][g], m);
      l += sm_l[w][g] * r;
#pragma unroll
      for (int e = 0; e < EPL; ++e) a[e] += sm_acc[w][g][lane * EPL + e] * r;
    }
    const int64_t head = seq * s.heads + h * G + g;
    if (s.partitions == 1) {  // The whole row: normalise and write.
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      Pack<T, EPL> o;
#pragma unroll
      for (int e = 0; e < EPL; ++e) o.v[e] = FromF<T>(a[e] * inv);
      Store<T, EPL>(out + head * D + lane * EPL, o);
    } else {
      const int64_t slot = head * s.partitions + part;
#pragma unroll
      for (int e = 0; e < EPL; ++e) partial[slot * D + lane * EPL + e] = a[e];
      if (lane == 0) {
        stats[2 * slot] = m;
        stats[2 * slot + 1] = l;
      }
    }
  }
}

// ---- tensor cores ---------------------------------------------------------

namespace wmma = nvcuda::wmma;
constexpr int kT = kDecodeTile;  // WMMA tile edge: 16 keys, 16 (padded) query rows.

template <typename T, int D>
__global__ void __launch_bounds__(kWarps * 32)
    PagedDecodeTcKernel(const T* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc,
                        const int64_t* __restrict__ table, const int64_t* __restrict__ positions,
                        float* __restrict__ partial, float* __restrict__ stats, T* __restrict__ out,
                        PagedDecodeShape s) {
  // Keys per softmax step: the chunk's fp32 scores and 16-bit P sit in
  // shared memory beside q and the running output (under 48 KB).
  constexpr int C = D <= 128 ? 256 : 128;
  __shared__ __align__(32) T q_s[kT][D];
  __shared__ __align__(32) float s_s[kT][C];
  __shared__ __align__(32) T p_s[kT][C];
  __shared__ __align__(32) float o_s[kT][D];
  __shared__ float m_s[kT], l_s[kT], c_s[kT];
  const int part = blockIdx.x, h = blockIdx.y;
  const int64_t seq = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, tid = threadIdx.x;
  const int G = s.heads / s.kv_heads;
  const int64_t max_keys = s.table_width * s.block_size;
  const int64_t chunk = PartitionKeys(max_keys, s.partitions);
  int64_t len = positions[seq] + 1;
  if (len > max_keys) len = max_keys;
  const int64_t begin = part * chunk;
  const int64_t end = begin + chunk < len ? begin + chunk : len;

  for (int i = tid; i < kT * D; i += kWarps * 32) {
    const int r = i / D, d = i % D;
    q_s[r][d] = r < G ? q[(seq * s.heads + h * G + r) * D + d] : FromF<T>(0.0f);
    o_s[r][d] = 0.0f;
  }
  for (int i = tid; i < kT * C; i += kWarps * 32) p_s[i / C][i % C] = FromF<T>(0.0f);  // Padding rows stay 0.
  if (tid < kT) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.0f;
  }
  __syncthreads();
  wmma::fragment<wmma::matrix_a, kT, kT, kT, T, wmma::row_major> qa[D / kT];
#pragma unroll
  for (int k = 0; k < D / kT; ++k) wmma::load_matrix_sync(qa[k], &q_s[0][k * kT], D);

  const int64_t* row = table + seq * s.table_width;
  const int64_t head_rows = int64_t{h} * s.cache_blocks * s.block_size;
  auto tile_rows = [&](int64_t tok) { return head_rows + row[tok / s.block_size] * s.block_size + tok % s.block_size; };
  const float sl2 = s.scale * kLog2E;
  for (int64_t c0 = begin; c0 < end; c0 += C) {
    const int n = static_cast<int>(end - c0 < C ? end - c0 : C);  // Keys of this chunk.
    const int tiles = (n + kT - 1) / kT;
    // Scores: warps take the chunk's tiles in turn.
    for (int t = warp; t < tiles; t += kWarps) {
      const T* kp = kc + tile_rows(c0 + t * kT) * D;
      wmma::fragment<wmma::accumulator, kT, kT, kT, float> acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int k = 0; k < D / kT; ++k) {
        wmma::fragment<wmma::matrix_b, kT, kT, kT, T, wmma::col_major> kb;
        wmma::load_matrix_sync(kb, kp + k * kT, D);
        wmma::mma_sync(acc, qa[k], kb, acc);
      }
      wmma::store_matrix_sync(&s_s[0][t * kT], acc, C, wmma::mem_row_major);
    }
    __syncthreads();
    // Exact softmax step per query row (warp w: rows w, w + kWarps, ...).
    for (int r = warp; r < G; r += kWarps) {
      float mx = -INFINITY;
      for (int j = lane; j < n; j += 32) mx = fmaxf(mx, s_s[r][j] * sl2);
      mx = WarpMax(mx);
      const float m_old = m_s[r], m_new = fmaxf(m_old, mx);
      float sum = 0.0f;
      for (int j = lane; j < tiles * kT; j += 32) {
        const T p = FromF<T>(j < n ? exp2f(s_s[r][j] * sl2 - m_new) : 0.0f);
        p_s[r][j] = p;
        sum += ToF(p);
      }
      sum = WarpSum(sum);
      if (lane == 0) {
        const float corr = Rescale(m_old, m_new);
        c_s[r] = corr;
        l_s[r] = l_s[r] * corr + sum;
        m_s[r] = m_new;
      }
    }
    __syncthreads();
    for (int i = tid; i < G * D; i += kWarps * 32) o_s[i / D][i % D] *= c_s[i / D];
    __syncthreads();
    // Output += P V: warp w owns output columns [16w, 16w + 16), ...
    for (int col = warp * kT; col < D; col += kWarps * kT) {
      wmma::fragment<wmma::accumulator, kT, kT, kT, float> acc;
      wmma::load_matrix_sync(acc, &o_s[0][col], D, wmma::mem_row_major);
#pragma unroll 4
      for (int t = 0; t < tiles; ++t) {
        wmma::fragment<wmma::matrix_a, kT, kT, kT, T, wmma::row_major> pa;
        wmma::fragment<wmma::matrix_b, kT, kT, kT, T, wmma::row_major> vb;
        wmma::load_matrix_sync(pa, &p_s[0][t * kT], C);
        wmma::load_matrix_sync(vb, vc + tile_rows(c0 + t * kT) * D + col, D);
        wmma::mma_sync(acc, pa, vb, acc);
      }
      wmma::store_matrix_sync(&o_s[0][col], acc, D, wmma::mem_row_major);
    }
    __syncthreads();
  }
  for (int i = tid; i < G * D; i += kWarps * 32) {
    const int r = i / D, d = i % D;
    const int64_t head = seq * s.heads + h * G + r;
    if (s.partitions == 1) {
      out[head * D + d] = FromF<T>(l_s[r] > 0.0f ? o_s[r][d] / l_s[r] : 0.0f);
    } else {
      const int64_t slot = head * s.partitions + part;
      partial[slot * D + d] = o_s[r][d];
      if (d == 0) {
        stats[2 * slot] = m_s[r];
        stats[2 * slot + 1] = l_s[r];
      }
    }
  }
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

template <typename T, int EPL>
int Launch(const void* q, const void* kc, const void* vc, const int64_t* table, const int64_t* positions,
           float* partial, float* stats, void* out, const PagedDecodeShape& s, cudaStream_t stream) {
  const dim3 grid(s.partitions, s.kv_heads, static_cast<unsigned>(s.seqs));
  bool tensor_cores = false;
  if constexpr (sizeof(T) == 2) {
    tensor_cores = s.block_size % kDecodeTile == 0;  // Tiles never straddle a cache block.
    if (tensor_cores) {
      PagedDecodeTcKernel<T, EPL * 32><<<grid, kWarps * 32, 0, stream>>>(
          static_cast<const T*>(q), static_cast<const T*>(kc), static_cast<const T*>(vc), table, positions, partial,
          stats, static_cast<T*>(out), s);
    }
  }
  if (!tensor_cores) {
    PagedDecodeKernel<T, EPL><<<grid, kWarps * 32, 0, stream>>>(
        static_cast<const T*>(q), static_cast<const T*>(kc), static_cast<const T*>(vc), table, positions, partial,
        stats, static_cast<T*>(out), s);
  }
  if (s.partitions > 1) {
    const int64_t rows = s.seqs * s.heads;
    PagedDecodeMergeKernel<T, EPL><<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), kWarps * 32, 0, stream>>>(
        partial, stats, static_cast<T*>(out), rows, s.partitions);
  }
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int ForHeadDim(const void* q, const void* kc, const void* vc, const int64_t* table, const int64_t* positions,
               float* partial, float* stats, void* out, const PagedDecodeShape& s, cudaStream_t stream) {
  switch (s.head_dim) {
    case 32: return Launch<T, 1>(q, kc, vc, table, positions, partial, stats, out, s, stream);
    case 64: return Launch<T, 2>(q, kc, vc, table, positions, partial, stats, out, s, stream);
    case 128: return Launch<T, 4>(q, kc, vc, table, positions, partial, stats, out, s, stream);
    case 256: return Launch<T, 8>(q, kc, vc, table, positions, partial, stats, out, s, stream);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace

int PagedDecodeAttention(DType dtype, const void* q, const void* k_cache, const void* v_cache, const int64_t* table,
                         const int64_t* positions, float* partial, float* stats, void* out,
                         const PagedDecodeShape& shape, void* stream) {
  if (!PagedDecodeSupported(shape.heads, shape.kv_heads, shape.head_dim) || shape.partitions < 1 ||
      shape.seqs < 1 || shape.seqs > 65535) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  auto st = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::kF32: return ForHeadDim<float>(q, k_cache, v_cache, table, positions, partial, stats, out, shape, st);
    case DType::kBF16:
      return ForHeadDim<__nv_bfloat16>(q, k_cache, v_cache, table, positions, partial, stats, out, shape, st);
    case DType::kF16: return ForHeadDim<__half>(q, k_cache, v_cache, table, positions, partial, stats, out, shape, st);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace kernelrl::learner::kernels
