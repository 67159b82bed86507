// 100_HingeLoss: per-block partial sums (double), then a single-block finish -> mean.
#include <cuda_runtime.h>

__device__ __forceinline__ double term(const float* p, const float* t, long long i, long long cols) {
  double v = 1.0 - (double)p[i] * (double)t[i % cols]; return v > 0.0 ? v : 0.0;
}

__global__ void partial_kernel(const float* __restrict__ p, const float* __restrict__ t, double* partial,
                               long long n, long long cols) {
  __shared__ double sh[256];
  double acc = 0.0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    acc += term(p, t, i, cols);
  }
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

__global__ void finish_kernel(const double* partial, int count, float* out, long long n) {
  __shared__ double sh[256];
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = (float)(sh[0] / (double)n);
}

static double* g_partial = nullptr;
static const int kBlocks = 132 * 8;

extern "C" int hinge_loss(const float* p, const float* t, float* out, long long n, long long cols) {
  if (g_partial == nullptr) {
    cudaError_t e = cudaMalloc(&g_partial, kBlocks * sizeof(double));
    if (e != cudaSuccess) return (int)e;
  }
  partial_kernel<<<kBlocks, 256>>>(p, t, g_partial, n, cols);
  finish_kernel<<<1, 256>>>(g_partial, kBlocks, out, n);
  return (int)cudaGetLastError();
}
