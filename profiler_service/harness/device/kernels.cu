// Test kernels for the profiler's device checks (tools/device_profiler.sh):
// five honest kernels of different shapes for CUPTI-vs-ncu agreement, and the
// exploit launchers the integrity analysis must flag. Not candidate code.
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace {

__global__ void vec_add(const float* a, const float* b, float* c, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  long stride = (long)gridDim.x * blockDim.x;
  for (; i < n; i += stride) c[i] = a[i] + b[i];
}

__global__ void scale_shift(const float* a, float* c, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] * 1.5f + 0.25f;
}

__global__ void transpose_naive(const float* a, float* c, int n) {
  int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 8 + threadIdx.y;
  for (int j = 0; j < 32; j += 8)
    if (x < n && y + j < n) c[(long)x * n + y + j] = a[(long)(y + j) * n + x];
}

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
int kt_transpose(const float* a, float* c, int n, cudaStream_t s) {
  transpose_naive<<<dim3(n / 32, n / 32), dim3(32, 8), 0, s>>>(a, c, n);
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
