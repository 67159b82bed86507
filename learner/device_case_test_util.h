// Tests parameterised over device and dtype: the CPU cases run everywhere,
// the CUDA ones wherever a GPU is present (common/gpu_presence.h's rule:
// skipped with the reason only where there is none; a GPU whose CUDA
// backend does not load fails).
#ifndef KERNELRL_LEARNER_DEVICE_CASE_TEST_UTIL_H_
#define KERNELRL_LEARNER_DEVICE_CASE_TEST_UTIL_H_

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "common/gpu_presence.h"

namespace kernelrl::learner::testing {

struct DeviceCase {
  std::string device;  // "cpu" or "cuda"
  at::ScalarType dtype;
};

// How gtest prints a failing case's parameter.
inline void PrintTo(const DeviceCase& c, std::ostream* os) { *os << c.device << " " << c.dtype; }

// cpu_f32, cuda_bf16, cuda_f16, ...
inline std::string DeviceCaseName(const ::testing::TestParamInfo<DeviceCase>& info) {
  const auto t = info.param.dtype;
  return info.param.device + (t == at::kFloat ? "_f32" : t == at::kBFloat16 ? "_bf16" : "_f16");
}

class DeviceCaseTest : public ::testing::TestWithParam<DeviceCase> {
 public:
  // Subclasses that override it call it first and return if IsSkipped().
  void SetUp() override {
    if (GetParam().device == "cuda") {
      if (!GpuDevicePresent()) GTEST_SKIP() << "CUDA case skipped: no GPU on this machine (no /dev/nvidiaN)";
      ASSERT_TRUE(at::hasCUDA()) << "a GPU is present but LibTorch's CUDA backend did not load";
    }
  }
  at::Device device() const {
    return GetParam().device == "cuda" ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  }
  at::TensorOptions opts() const { return at::TensorOptions().device(device()).dtype(GetParam().dtype); }
  bool half() const { return GetParam().dtype != at::kFloat; }
};

}  // namespace kernelrl::learner::testing

#endif  // KERNELRL_LEARNER_DEVICE_CASE_TEST_UTIL_H_
