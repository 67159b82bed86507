// CUDA side of fused_kernels.h. Memory-bound kernels: each reads its inputs
// once and writes its outputs once, in fp32 math, with 16-byte vector
// accesses where rows allow it. The formulas live in fused_math.h.
#include "learner/kernels/fused_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "learner/kernels/device_util.cuh"
#include "learner/kernels/fused_math.h"

namespace kernelrl::learner::kernels {
namespace {

bool Aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

int LastError() { return static_cast<int>(cudaGetLastError()); }

unsigned Blocks(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < (int64_t{1} << 30) ? b : (int64_t{1} << 30));
}

// ---- RoPE + split ---------------------------------------------------------

template <typename T>
__global__ void RopeSplitForwardKernel(const T* __restrict__ qkv, const T* __restrict__ cos,
                                       const T* __restrict__ sin, T* __restrict__ q, T* __restrict__ k,
                                       T* __restrict__ v, RopeShape s) {
  const int D = s.head_dim, half = D / 2, heads = s.heads + 2 * s.kv_heads;
  const int64_t total = RopePairs(s);
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const RopeSite r = Locate(idx, s);
    const T* x = qkv + r.n * heads * D + int64_t{r.hh} * D;
    float y1 = ToF(x[r.j]), y2 = ToF(x[r.j + half]);
    if (r.rotate) {
      const T* c = cos + r.n * D;
      const T* sn = sin + r.n * D;
      RopePair(y1, y2, ToF(c[r.j]), ToF(sn[r.j]), ToF(c[r.j + half]), ToF(sn[r.j + half]), &y1, &y2);
    }
    T* out = (r.part == 0 ? q : r.part == 1 ? k : v) + r.offset;
    out[r.j] = FromF<T>(y1);
    out[r.j + half] = FromF<T>(y2);
  }
}

template <typename T>
__global__ void RopeSplitBackwardKernel(const T* __restrict__ dq, const T* __restrict__ dk,
                                        const T* __restrict__ dv, const T* __restrict__ cos,
                                        const T* __restrict__ sin, T* __restrict__ dqkv, RopeShape s) {
  const int D = s.head_dim, half = D / 2, heads = s.heads + 2 * s.kv_heads;
  const int64_t total = RopePairs(s);
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const RopeSite r = Locate(idx, s);
    const T* dy = (r.part == 0 ? dq : r.part == 1 ? dk : dv) + r.offset;
    float d1 = ToF(dy[r.j]), d2 = ToF(dy[r.j + half]);
    if (r.rotate) {
      const T* c = cos + r.n * D;
      const T* sn = sin + r.n * D;
      RopePairGrad(d1, d2, ToF(c[r.j]), ToF(sn[r.j]), ToF(c[r.j + half]), ToF(sn[r.j + half]), &d1, &d2);
    }
    T* dx = dqkv + r.n * heads * D + int64_t{r.hh} * D;
    dx[r.j] = FromF<T>(d1);
    dx[r.j + half] = FromF<T>(d2);
  }
}

// ---- SwiGLU ---------------------------------------------------------------

template <typename T, int VEC>
__global__ void SwiGluForwardKernel(const T* __restrict__ gu, T* __restrict__ y, int64_t rows, int64_t inter) {
  const int64_t per_row = inter / VEC, total = rows * per_row;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = idx / per_row, c = (idx % per_row) * VEC;
    const Pack<T, VEC> g = Load<T, VEC>(gu + r * 2 * inter + c);
    const Pack<T, VEC> u = Load<T, VEC>(gu + r * 2 * inter + inter + c);
    Pack<T, VEC> out;
#pragma unroll
    for (int i = 0; i < VEC; ++i) out.v[i] = FromF<T>(SwiGlu(ToF(g.v[i]), ToF(u.v[i])));
    Store<T, VEC>(y + r * inter + c, out);
  }
}

template <typename T, int VEC>
__global__ void SwiGluBackwardKernel(const T* __restrict__ gu, const T* __restrict__ dy, T* __restrict__ dgu,
                                     int64_t rows, int64_t inter) {
  const int64_t per_row = inter / VEC, total = rows * per_row;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = idx / per_row, c = (idx % per_row) * VEC;
    const Pack<T, VEC> g = Load<T, VEC>(gu + r * 2 * inter + c);
    const Pack<T, VEC> u = Load<T, VEC>(gu + r * 2 * inter + inter + c);
    const Pack<T, VEC> d = Load<T, VEC>(dy + r * inter + c);
    Pack<T, VEC> dg, du;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      float a, b;
      SwiGluGrad(ToF(g.v[i]), ToF(u.v[i]), ToF(d.v[i]), &a, &b);
      dg.v[i] = FromF<T>(a);
      du.v[i] = FromF<T>(b);
    }
    Store<T, VEC>(dgu + r * 2 * inter + c, dg);
    Store<T, VEC>(dgu + r * 2 * inter + inter + c, du);
  }
}

// ---- token log-probs ------------------------------------------------------

constexpr int kRowThreads = 512;

__device__ __forceinline__ LseState WarpMerge(LseState st) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    LseState other{__shfl_xor_sync(0xffffffffu, st.m, o), __shfl_xor_sync(0xffffffffu, st.s, o)};
    st = LseMerge(st, other);
  }
  return st;
}

// One block per row: a single pass of online log-sum-exp over the row.
template <typename T, int VEC>
__global__ void __launch_bounds__(kRowThreads) LogprobForwardKernel(const T* __restrict__ logits, int64_t ld,
                                                                    const int64_t* __restrict__ targets,
                                                                    float inv_temp, float* __restrict__ logp,
                                                                    float* __restrict__ lse, int64_t vocab) {
  const int64_t r = blockIdx.x;
  const T* row = logits + r * ld;
  LseState st = LseEmpty();
  for (int64_t c = int64_t{threadIdx.x} * VEC; c < vocab; c += int64_t{blockDim.x} * VEC) {
    const Pack<T, VEC> x = Load<T, VEC>(row + c);
#pragma unroll
    for (int i = 0; i < VEC; ++i) LseAdd(&st, ToF(x.v[i]) * inv_temp);
  }
  st = WarpMerge(st);
  __shared__ float wm[kRowThreads / 32], ws[kRowThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    wm[warp] = st.m;
    ws[warp] = st.s;
  }
  __syncthreads();
  if (warp == 0) {
    st = lane < blockDim.x / 32 ? LseState{wm[lane], ws[lane]} : LseEmpty();
    st = WarpMerge(st);
    if (lane == 0) {
      const float value = LseValue(st);
      const int64_t t = targets[r];
      lse[r] = value;
      // An id past the vocabulary is a caller bug: NaN makes it visible.
      logp[r] = t < 0 ? 0.0f : (t >= vocab ? NAN : ToF(row[t]) * inv_temp - value);
    }
  }
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kRowThreads) LogprobBackwardKernel(const T* logits, int64_t ld,
                                                                     const int64_t* __restrict__ targets,
                                                                     const float* __restrict__ lse,
                                                                     const float* __restrict__ g, float inv_temp,
                                                                     T* dlogits, int64_t vocab) {
  const int64_t r = blockIdx.x;
  const T* row = logits + r * ld;
  T* drow = dlogits + r * ld;
  const float lr = lse[r], gr = g[r];
  const int64_t t = targets[r];
  for (int64_t c = int64_t{threadIdx.x} * VEC; c < vocab; c += int64_t{blockDim.x} * VEC) {
    const Pack<T, VEC> x = Load<T, VEC>(row + c);
    Pack<T, VEC> d;
#pragma unroll
    for (int i = 0; i < VEC; ++i) d.v[i] = FromF<T>(LogprobGrad(ToF(x.v[i]) * inv_temp, lr, gr, inv_temp, c + i == t));
    Store<T, VEC>(drow + c, d);
  }
}

// ---- dispatch ---------------------------------------------------------------

template <typename F>
int ByType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: return f(float{});
    case DType::kBF16: return f(__nv_bfloat16{});
    case DType::kF16: return f(__half{});
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

constexpr int kThreads = 256;

// Calls launch(std::integral_constant<int, V>) with V = 16 bytes of T when
// the rows allow 16-byte accesses, else V = 1 (scalar kernel).
template <typename T, typename F>
int LaunchVectorised(bool vectorisable, F&& launch) {
  if (vectorisable) {
    launch(std::integral_constant<int, 16 / sizeof(T)>{});
  } else {
    launch(std::integral_constant<int, 1>{});
  }
  return LastError();
}

}  // namespace

int RopeSplitForward(DType dtype, const void* qkv, const void* cos, const void* sin, void* q, void* k, void* v,
                     RopeShape s, void* stream) {
  const int64_t n = RopePairs(s);
  if (n == 0) return 0;
  return ByType(dtype, [&](auto zero) {
    using T = decltype(zero);
    RopeSplitForwardKernel<T><<<Blocks(n, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(qkv), static_cast<const T*>(cos), static_cast<const T*>(sin), static_cast<T*>(q),
        static_cast<T*>(k), static_cast<T*>(v), s);
    return LastError();
  });
}

int RopeSplitBackward(DType dtype, const void* dq, const void* dk, const void* dv, const void* cos,
                      const void* sin, void* dqkv, RopeShape s, void* stream) {
  const int64_t n = RopePairs(s);
  if (n == 0) return 0;
  return ByType(dtype, [&](auto zero) {
    using T = decltype(zero);
    RopeSplitBackwardKernel<T><<<Blocks(n, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(dq), static_cast<const T*>(dk), static_cast<const T*>(dv), static_cast<const T*>(cos),
        static_cast<const T*>(sin), static_cast<T*>(dqkv), s);
    return LastError();
  });
}

int SwiGluForward(DType dtype, const void* gu, void* y, int64_t rows, int64_t inter, void* stream) {
  if (rows * inter == 0) return 0;
  return ByType(dtype, [&](auto zero) {
    using T = decltype(zero);
    const bool vec = inter % (16 / sizeof(T)) == 0 && Aligned(gu, 16) && Aligned(y, 16);
    return LaunchVectorised<T>(vec, [&](auto v) {
      constexpr int V = decltype(v)::value;
      SwiGluForwardKernel<T, V><<<Blocks(rows * inter / V, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
          static_cast<const T*>(gu), static_cast<T*>(y), rows, inter);
    });
  });
}

int SwiGluBackward(DType dtype, const void* gu, const void* dy, void* dgu, int64_t rows, int64_t inter,
                   void* stream) {
  if (rows * inter == 0) return 0;
  return ByType(dtype, [&](auto zero) {
    using T = decltype(zero);
    const bool vec = inter % (16 / sizeof(T)) == 0 && Aligned(gu, 16) && Aligned(dy, 16) && Aligned(dgu, 16);
    return LaunchVectorised<T>(vec, [&](auto v) {
      constexpr int V = decltype(v)::value;
      SwiGluBackwardKernel<T, V><<<Blocks(rows * inter / V, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
          static_cast<const T*>(gu), static_cast<const T*>(dy), static_cast<T*>(dgu), rows, inter);
    });
  });
}

int LogprobForward(DType dtype, const void* logits, int64_t ld, const int64_t* targets, float inv_temp, float* logp,
                   float* lse, int64_t rows, int64_t vocab, void* stream) {
  if (rows == 0) return 0;
  if (rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  return ByType(dtype, [&](auto zero) {
    using T = decltype(zero);
    constexpr int kVec = 16 / sizeof(T);
    const bool vec = vocab % kVec == 0 && ld % kVec == 0 && Aligned(logits, 16);
    return LaunchVectorised<T>(vec, [&](auto v) {
      LogprobForwardKernel<T, decltype(v)::value>
          <<<static_cast<unsigned>(rows), kRowThreads, 0, static_cast<cudaStream_t>(stream)>>>(
              static_cast<const T*>(logits), ld, targets, inv_temp, logp, lse, vocab);
    });
  });
}

int LogprobBackward(DType dtype, const void* logits, int64_t ld, const int64_t* targets, const float* lse,
                    const float* g, float inv_temp, void* dlogits, int64_t rows, int64_t vocab, void* stream) {
  if (rows == 0) return 0;
  if (rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  return ByType(dtype, [&](auto zero) {
    using T = decltype(zero);
    constexpr int kVec = 16 / sizeof(T);
    const bool vec = vocab % kVec == 0 && ld % kVec == 0 && Aligned(logits, 16) && Aligned(dlogits, 16);
    return LaunchVectorised<T>(vec, [&](auto v) {
      LogprobBackwardKernel<T, decltype(v)::value>
          <<<static_cast<unsigned>(rows), kRowThreads, 0, static_cast<cudaStream_t>(stream)>>>(
              static_cast<const T*>(logits), ld, targets, lse, g, inv_temp, static_cast<T*>(dlogits), vocab);
    });
  });
}

const char* ErrorString(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

}  // namespace kernelrl::learner::kernels
