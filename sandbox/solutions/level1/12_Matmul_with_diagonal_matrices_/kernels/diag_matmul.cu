// C[i, j] = A[i] * B[i, j]: one block row per i, coalesced over j.
#include <cuda_runtime.h>

__global__ void diag_matmul_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                                   long long n, long long m) {
  const long long i = blockIdx.y;
  const float s = a[i];
  for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < m; j += (long long)gridDim.x * blockDim.x) {
    c[i * m + j] = s * b[i * m + j];
  }
}

extern "C" int diag_matmul(const float* a, const float* b, float* c, long long n, long long m) {
  dim3 grid((unsigned)((m + 255) / 256 > 16 ? 16 : (m + 255) / 256), (unsigned)n);
  diag_matmul_kernel<<<grid, 256>>>(a, b, c, n, m);
  return (int)cudaGetLastError();
}
