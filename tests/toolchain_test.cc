// The CUDA library targets of the workspace link and answer on a machine
// without a GPU: NVRTC compiles a kernel to sm_90 PTX on the CPU; cuBLAS,
// cuDNN and CUPTI report their versions; nvml.h compiles. The cudart device
// query runs everywhere and the GPU part skips only where there is no GPU
// (no /dev/nvidiaN); with one present, a CUDA runtime that fails is a failure.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <cupti.h>
#include <dlfcn.h>
#include <nvml.h>
#include <nvrtc.h>

#include <string>
#include <vector>

#include "common/gpu_presence.h"
#include "gtest/gtest.h"

namespace {

TEST(ToolchainTest, NvrtcCompilesKernelForHopper) {
  const char* source = R"(extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
  })";
  nvrtcProgram program;
  ASSERT_EQ(nvrtcCreateProgram(&program, source, "axpy.cu", 0, nullptr, nullptr), NVRTC_SUCCESS);
  const char* options[] = {"--gpu-architecture=compute_90", "-default-device"};
  const nvrtcResult result = nvrtcCompileProgram(program, 2, options);
  size_t log_size = 0;
  nvrtcGetProgramLogSize(program, &log_size);
  std::string log(log_size, '\0');
  nvrtcGetProgramLog(program, log.data());
  ASSERT_EQ(result, NVRTC_SUCCESS) << log;
  size_t ptx_size = 0;
  ASSERT_EQ(nvrtcGetPTXSize(program, &ptx_size), NVRTC_SUCCESS);
  std::string ptx(ptx_size, '\0');
  ASSERT_EQ(nvrtcGetPTX(program, ptx.data()), NVRTC_SUCCESS);
  nvrtcDestroyProgram(&program);
  EXPECT_NE(ptx.find(".target sm_90"), std::string::npos);
  EXPECT_NE(ptx.find(".entry axpy"), std::string::npos);
}

TEST(ToolchainTest, LibrariesReportVersions) {
  int cublas_major = 0;
  ASSERT_EQ(cublasGetProperty(MAJOR_VERSION, &cublas_major), CUBLAS_STATUS_SUCCESS);
  EXPECT_GE(cublas_major, 13);
  EXPECT_GE(cudnnGetVersion(), 90000u);
  uint32_t cupti_version = 0;
  ASSERT_EQ(cuptiGetVersion(&cupti_version), CUPTI_SUCCESS);
  EXPECT_GT(cupti_version, 0u);
  int runtime_version = 0;
  ASSERT_EQ(cudaRuntimeGetVersion(&runtime_version), cudaSuccess);
  EXPECT_GE(runtime_version, 13000);
  EXPECT_EQ(static_cast<int>(NVML_SUCCESS), 0);  // nvml.h is on the include path.
}

TEST(ToolchainTest, DeviceQuery) {
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (!kernelrl::GpuDevicePresent()) {
    GTEST_SKIP() << "no GPU on this machine (no /dev/nvidiaN; cudart: " << cudaGetErrorString(err)
                 << "); GPU checks run on the device machine";
  }
  ASSERT_EQ(err, cudaSuccess) << "a GPU is present but cudart cannot count it: " << cudaGetErrorString(err);
  ASSERT_GT(devices, 0) << "a GPU is present but cudart sees none";
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_GT(prop.multiProcessorCount, 0);
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  EXPECT_NE(nvml, nullptr) << "GPU present but the driver's NVML is not loadable";
}

}  // namespace
