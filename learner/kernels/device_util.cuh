// Device helpers of the learner's CUDA sources: fp32 conversions of the
// element types and aligned vector loads and stores.
#ifndef KERNELRL_LEARNER_KERNELS_DEVICE_UTIL_CUH_
#define KERNELRL_LEARNER_KERNELS_DEVICE_UTIL_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kernelrl::learner::kernels {

__device__ __forceinline__ float ToF(float x) { return x; }
__device__ __forceinline__ float ToF(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float ToF(__half x) { return __half2float(x); }
template <typename T>
__device__ __forceinline__ T FromF(float x);
template <>
__device__ __forceinline__ float FromF<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 FromF<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <>
__device__ __forceinline__ __half FromF<__half>(float x) { return __float2half(x); }

// VEC consecutive elements moved as one aligned access.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> Load(const T* p) { return *reinterpret_cast<const Pack<T, VEC>*>(p); }
template <typename T, int VEC>
__device__ __forceinline__ void Store(T* p, const Pack<T, VEC>& x) { *reinterpret_cast<Pack<T, VEC>*>(p) = x; }

}  // namespace kernelrl::learner::kernels

#endif  // KERNELRL_LEARNER_KERNELS_DEVICE_UTIL_CUH_
