// Test kernels for the profiler's device checks (tools/device_profiler.sh):
// honest kernels of the kinds KernelBench candidates are (elementwise, row
// reductions, transposes, convolutions, GEMM) for CUPTI-vs-ncu agreement, and
// the exploit launchers the integrity analysis must flag. Not candidate code.
// Every kernel has a distinct name: the comparison maps ncu's rows to cases by
// kernel name (checks.py), so a size variant gets its own __global__ wrapper.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include <atomic>
#include <chrono>
#include <thread>

namespace {

__global__ void vec_add(const float* a, const float* b, float* c, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  long stride = (long)gridDim.x * blockDim.x;
  for (; i < n; i += stride) c[i] = a[i] + b[i];
}

__device__ __forceinline__ void ScaleShift(const float* a, float* c, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] * 1.5f + 0.25f;
}
__global__ void scale_shift(const float* a, float* c, long n) { ScaleShift(a, c, n); }
// Same code, 4x the data: tells a fixed offset (us) from a proportional one (%).
__global__ void scale_shift_4x(const float* a, float* c, long n) { ScaleShift(a, c, n); }

__device__ __forceinline__ void TransposeNaive(const float* a, float* c, int n) {
  int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 8 + threadIdx.y;
  for (int j = 0; j < 32; j += 8)
    if (x < n && y + j < n) c[(long)x * n + y + j] = a[(long)(y + j) * n + x];
}
__global__ void transpose_naive(const float* a, float* c, int n) { TransposeNaive(a, c, n); }
__global__ void transpose_naive_4x(const float* a, float* c, int n) { TransposeNaive(a, c, n); }

__global__ void row_sum(const float* a, float* c, int rows, int cols) {
  int r = blockIdx.x;
  float s = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) s += a[(long)r * cols + j];
  __shared__ float buf[256];
  buf[threadIdx.x] = s;
  __syncthreads();
  for (int w = 128; w > 0; w >>= 1) {
    if (threadIdx.x < w) buf[threadIdx.x] += buf[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) c[r] = buf[0];
}

__global__ void fma_loop(const float* a, float* c, long n, int iters) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = a[i], y = 1.0f;
  for (int k = 0; k < iters; ++k) y = fmaf(y, x, 0.5f);
  c[i] = y;
}

__global__ void matmul_tiled(const float* A, const float* B, float* C, int n) {
  __shared__ float As[16][16], Bs[16][16];
  int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
  float acc = 0.f;
  for (int t = 0; t < n; t += 16) {
    As[threadIdx.y][threadIdx.x] = A[(long)row * n + t + threadIdx.x];
    Bs[threadIdx.y][threadIdx.x] = B[(long)(t + threadIdx.y) * n + col];
    __syncthreads();
    for (int k = 0; k < 16; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  C[(long)row * n + col] = acc;
}

// ---- Row-wise kernels: one 256-thread block per 4096-float row, the row held
// in registers as float4 (4 per thread), block reductions by warp shuffles.
constexpr int kRowThreads = 256, kRowVec = 4, kRowCols = kRowThreads * kRowVec * 4;

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Every thread gets the block's result. smem: 32 floats, reused by successive calls.
template <bool kMax>
__device__ float BlockReduce(float v, float* smem) {
  v = kMax ? WarpMax(v) : WarpSum(v);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // The previous call's readers are done with smem.
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = lane < (int)(blockDim.x >> 5) ? smem[lane] : (kMax ? -INFINITY : 0.f);
  return kMax ? WarpMax(v) : WarpSum(v);
}

__global__ void softmax_rows(const float* x, float* y) {
  const float4* in = reinterpret_cast<const float4*>(x + (long)blockIdx.x * kRowCols);
  float4* out = reinterpret_cast<float4*>(y + (long)blockIdx.x * kRowCols);
  __shared__ float smem[32];
  float4 v[kRowVec];
  float m = -INFINITY;
  for (int i = 0; i < kRowVec; ++i) {
    v[i] = in[threadIdx.x + i * kRowThreads];
    m = fmaxf(m, fmaxf(fmaxf(v[i].x, v[i].y), fmaxf(v[i].z, v[i].w)));
  }
  m = BlockReduce<true>(m, smem);
  float s = 0.f;
  for (int i = 0; i < kRowVec; ++i) {
    v[i].x = expf(v[i].x - m), v[i].y = expf(v[i].y - m), v[i].z = expf(v[i].z - m), v[i].w = expf(v[i].w - m);
    s += (v[i].x + v[i].y) + (v[i].z + v[i].w);
  }
  float inv = 1.f / BlockReduce<false>(s, smem);
  for (int i = 0; i < kRowVec; ++i)
    out[threadIdx.x + i * kRowThreads] = make_float4(v[i].x * inv, v[i].y * inv, v[i].z * inv, v[i].w * inv);
}

// y = x * rsqrt(mean(x^2) + eps) * w, per row (RMSNorm).
__global__ void rmsnorm_rows(const float* x, const float* w, float* y, float eps) {
  const float4* in = reinterpret_cast<const float4*>(x + (long)blockIdx.x * kRowCols);
  const float4* wv = reinterpret_cast<const float4*>(w);
  float4* out = reinterpret_cast<float4*>(y + (long)blockIdx.x * kRowCols);
  __shared__ float smem[32];
  float4 v[kRowVec];
  float s = 0.f;
  for (int i = 0; i < kRowVec; ++i) {
    v[i] = in[threadIdx.x + i * kRowThreads];
    s += (v[i].x * v[i].x + v[i].y * v[i].y) + (v[i].z * v[i].z + v[i].w * v[i].w);
  }
  float r = rsqrtf(BlockReduce<false>(s, smem) / kRowCols + eps);
  for (int i = 0; i < kRowVec; ++i) {
    float4 g = wv[threadIdx.x + i * kRowThreads];
    out[threadIdx.x + i * kRowThreads] = make_float4(v[i].x * r * g.x, v[i].y * r * g.y, v[i].z * r * g.z,
                                                     v[i].w * r * g.w);
  }
}

// Shared-memory tiled transpose (32x33 tile: the +1 avoids bank conflicts);
// both global accesses coalesced, unlike transpose_naive.
__global__ void transpose_tiled(const float* a, float* c, int n) {
  __shared__ float tile[32][33];
  int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += 8) tile[threadIdx.y + j][threadIdx.x] = a[(long)(y + j) * n + x];
  __syncthreads();
  x = blockIdx.y * 32 + threadIdx.x, y = blockIdx.x * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += 8) c[(long)(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}

// Full sum: float4 grid-stride loads, warp-shuffle block reduce, one float
// atomicAdd per block into a device accumulator; the last block (atomic
// ticket) moves the total to out[0] and resets the state for the next launch,
// so no memset is needed inside the timed window (ncu would not time it).
// Launches must not overlap (one stream here).
__device__ float g_sum_acc = 0.f;
__device__ unsigned int g_sum_ticket = 0;

__global__ void sum_shfl_atomic(const float4* a, float* out, long n4) {
  __shared__ float smem[32];
  float s = 0.f;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n4; i += (long)gridDim.x * blockDim.x) {
    float4 v = a[i];
    s += (v.x + v.y) + (v.z + v.w);
  }
  s = BlockReduce<false>(s, smem);
  if (threadIdx.x == 0) {
    atomicAdd(&g_sum_acc, s);
    __threadfence();  // This block's add is visible before its ticket.
    if (atomicAdd(&g_sum_ticket, 1u) == gridDim.x - 1) {
      out[0] = atomicExch(&g_sum_acc, 0.f);
      atomicExch(&g_sum_ticket, 0u);
    }
  }
}

// Exact-erf GELU (torch's default) on bf16, 8 values (16 bytes) per thread.
__device__ __forceinline__ float Gelu(float v) { return 0.5f * v * (1.f + erff(v * 0.70710678118654752f)); }

__global__ void gelu_bf16(const uint4* x, uint4* y, long n8) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= n8) return;
  uint4 v = x[i];
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
  for (int k = 0; k < 4; ++k) {
    float2 f = __bfloat1622float2(h[k]);
    h[k] = __floats2bfloat162_rn(Gelu(f.x), Gelu(f.y));
  }
  y[i] = v;
}

__global__ void copy_vec4(const float4* a, float4* c, long n4) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n4) c[i] = a[i];
}

// Direct 3x3 convolution, NCHW, stride 1, zero padding 1, no bias. A 16x16
// block computes a 16x16 output tile for kConvK output channels; per input
// channel it stages the 18x18 halo tile and the kConvK x 9 weights in shared memory.
constexpr int kConvTile = 16, kConvK = 8;

__global__ void conv3x3_direct(const float* x, const float* w, float* y, int C, int K, int H, int W) {
  __shared__ float xs[kConvTile + 2][kConvTile + 2];
  __shared__ float ws[kConvK][9];
  int groups = K / kConvK, n = blockIdx.z / groups, k0 = (blockIdx.z % groups) * kConvK;
  int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kConvTile + tx;
  int x0 = blockIdx.x * kConvTile, y0 = blockIdx.y * kConvTile;
  float acc[kConvK] = {};
  for (int c = 0; c < C; ++c) {
    const float* xc = x + ((long)n * C + c) * H * W;
    for (int i = tid; i < (kConvTile + 2) * (kConvTile + 2); i += kConvTile * kConvTile) {
      int gy = y0 + i / (kConvTile + 2) - 1, gx = x0 + i % (kConvTile + 2) - 1;
      xs[i / (kConvTile + 2)][i % (kConvTile + 2)] =
          gy >= 0 && gy < H && gx >= 0 && gx < W ? xc[(long)gy * W + gx] : 0.f;
    }
    if (tid < kConvK * 9) ws[tid / 9][tid % 9] = w[((long)(k0 + tid / 9) * C + c) * 9 + tid % 9];
    __syncthreads();
    for (int dy = 0; dy < 3; ++dy)
      for (int dx = 0; dx < 3; ++dx) {
        float v = xs[ty + dy][tx + dx];
        for (int k = 0; k < kConvK; ++k) acc[k] += ws[k][dy * 3 + dx] * v;
      }
    __syncthreads();
  }
  for (int k = 0; k < kConvK; ++k) y[(((long)n * K + k0 + k) * H + y0 + ty) * W + x0 + tx] = acc[k];
}

std::atomic<bool> g_stop{false};
std::atomic<int> g_running{0};

unsigned Blocks(long n, int t) { return (unsigned)((n + t - 1) / t); }

}  // namespace

extern "C" {

int kt_vec_add(const float* a, const float* b, float* c, long n, cudaStream_t s) {
  vec_add<<<132 * 16, 256, 0, s>>>(a, b, c, n);
  return (int)cudaGetLastError();
}
int kt_scale_shift(const float* a, float* c, long n, cudaStream_t s) {
  scale_shift<<<Blocks(n, 256), 256, 0, s>>>(a, c, n);
  return (int)cudaGetLastError();
}
int kt_scale_shift_4x(const float* a, float* c, long n, cudaStream_t s) {
  scale_shift_4x<<<Blocks(n, 256), 256, 0, s>>>(a, c, n);
  return (int)cudaGetLastError();
}
int kt_transpose(const float* a, float* c, int n, cudaStream_t s) {
  transpose_naive<<<dim3(n / 32, n / 32), dim3(32, 8), 0, s>>>(a, c, n);
  return (int)cudaGetLastError();
}
int kt_transpose_4x(const float* a, float* c, int n, cudaStream_t s) {
  transpose_naive_4x<<<dim3(n / 32, n / 32), dim3(32, 8), 0, s>>>(a, c, n);
  return (int)cudaGetLastError();
}
int kt_row_sum(const float* a, float* c, int rows, int cols, cudaStream_t s) {
  row_sum<<<rows, 256, 0, s>>>(a, c, rows, cols);
  return (int)cudaGetLastError();
}
int kt_fma_loop(const float* a, float* c, long n, int iters, cudaStream_t s) {
  fma_loop<<<Blocks(n, 256), 256, 0, s>>>(a, c, n, iters);
  return (int)cudaGetLastError();
}
int kt_matmul(const float* A, const float* B, float* C, int n, cudaStream_t s) {
  matmul_tiled<<<dim3(n / 16, n / 16), dim3(16, 16), 0, s>>>(A, B, C, n);
  return (int)cudaGetLastError();
}

// The kernels below check their shape constraints and return
// cudaErrorInvalidValue instead of launching on a shape they do not handle.
int kt_softmax_rows(const float* x, float* y, int rows, int cols, cudaStream_t s) {
  if (cols != kRowCols) return (int)cudaErrorInvalidValue;
  softmax_rows<<<rows, kRowThreads, 0, s>>>(x, y);
  return (int)cudaGetLastError();
}
int kt_rmsnorm_rows(const float* x, const float* w, float* y, int rows, int cols, float eps, cudaStream_t s) {
  if (cols != kRowCols) return (int)cudaErrorInvalidValue;
  rmsnorm_rows<<<rows, kRowThreads, 0, s>>>(x, w, y, eps);
  return (int)cudaGetLastError();
}
int kt_transpose_tiled(const float* a, float* c, int n, cudaStream_t s) {
  if (n % 32) return (int)cudaErrorInvalidValue;
  transpose_tiled<<<dim3(n / 32, n / 32), dim3(32, 8), 0, s>>>(a, c, n);
  return (int)cudaGetLastError();
}
int kt_sum_shfl_atomic(const float* a, float* out, long n, cudaStream_t s) {
  if (n % 4) return (int)cudaErrorInvalidValue;
  // 8 blocks of 256 per SM (132 on the H100): enough loads in flight, few atomics.
  sum_shfl_atomic<<<132 * 8, 256, 0, s>>>(reinterpret_cast<const float4*>(a), out, n / 4);
  return (int)cudaGetLastError();
}
int kt_gelu_bf16(const void* x, void* y, long n, cudaStream_t s) {
  if (n % 8) return (int)cudaErrorInvalidValue;
  gelu_bf16<<<Blocks(n / 8, 256), 256, 0, s>>>(static_cast<const uint4*>(x), static_cast<uint4*>(y), n / 8);
  return (int)cudaGetLastError();
}
int kt_copy_vec4(const float* a, float* c, long n, cudaStream_t s) {
  if (n % 4) return (int)cudaErrorInvalidValue;
  copy_vec4<<<Blocks(n / 4, 256), 256, 0, s>>>(reinterpret_cast<const float4*>(a), reinterpret_cast<float4*>(c),
                                               n / 4);
  return (int)cudaGetLastError();
}
int kt_conv3x3(const float* x, const float* w, float* y, int N, int C, int K, int H, int W, cudaStream_t s) {
  if (K % kConvK || H % kConvTile || W % kConvTile) return (int)cudaErrorInvalidValue;
  conv3x3_direct<<<dim3(W / kConvTile, H / kConvTile, N * (K / kConvK)), dim3(kConvTile, kConvTile), 0, s>>>(
      x, w, y, C, K, H, W);
  return (int)cudaGetLastError();
}

// Exploit: the work runs on a private stream the harness never sees; CUDA
// events on the harness stream close before it finishes.
int kt_vec_add_side_stream(const float* a, const float* b, float* c, long n) {
  static cudaStream_t side = nullptr;
  if (!side && cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) != cudaSuccess) return -1;
  vec_add<<<132 * 16, 256, 0, side>>>(a, b, c, n);
  return (int)cudaGetLastError();
}

// Exploit: the launch comes from another thread (joined: lands in the window).
int kt_vec_add_thread(const float* a, const float* b, float* c, long n) {
  int rc = 0;
  std::thread t([&] {
    vec_add<<<132 * 16, 256, 0, cudaStreamPerThread>>>(a, b, c, n);
    rc = (int)cudaGetLastError();
    cudaStreamSynchronize(cudaStreamPerThread);
  });
  t.join();
  return rc;
}

// Exploit: a detached thread keeps launching after the call returns, so its
// work lands between timing windows (e.g. precomputing during the flush).
int kt_background_burner(const float* a, float* c, long n, int launches) {
  g_stop = false;
  g_running++;
  std::thread([=] {
    for (int i = 0; i < launches && !g_stop; ++i) {
      fma_loop<<<Blocks(n, 256), 256, 0, cudaStreamPerThread>>>(a, c, n, 200);
      cudaStreamSynchronize(cudaStreamPerThread);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    g_running--;
  }).detach();
  return 0;
}

// Stops the background burner and waits for its thread to finish.
int kt_stop_background(void) {
  g_stop = true;
  while (g_running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return 0;
}

}  // extern "C"
