// 88_MinGPTNewGelu: one thread per element, grid-stride, float4 where aligned.
#include <cuda_runtime.h>
#include <math.h>

__device__ __forceinline__ float op(float x) {
  const float k = 0.7978845608028654f; return 0.5f * x * (1.f + tanhf(k * (x + 0.044715f * x * x * x)));
}

__global__ void new_gelu_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
  const long long n4 = n / 4;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float4* y4 = reinterpret_cast<float4*>(y);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
    float4 v = x4[i];
    v.x = op(v.x); v.y = op(v.y); v.z = op(v.z); v.w = op(v.w);
    y4[i] = v;
  }
  for (long long i = n4 * 4 + blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    y[i] = op(x[i]);
  }
}

extern "C" int new_gelu_forward(const float* x, float* y, long long n) {
  const int threads = 256;
  long long blocks = (n / 4 + threads - 1) / threads;
  if (blocks > 132 * 32) blocks = 132 * 32;
  if (blocks < 1) blocks = 1;
  new_gelu_kernel<<<(unsigned)blocks, threads>>>(x, y, n);
  return (int)cudaGetLastError();
}
