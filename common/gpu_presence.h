// Whether this machine has an NVIDIA GPU, judged from the device nodes the
// driver creates (/dev/nvidia0, /dev/nvidia1, ...), never from CUDA itself.
// The rule for GPU tests (tools/test.sh counts skips): a test may skip its GPU
// cases only when no GPU is present; on a machine with one, a CUDA library,
// backend or kernel that does not load is a failure, never a skip.
#ifndef KERNELRL_COMMON_GPU_PRESENCE_H_
#define KERNELRL_COMMON_GPU_PRESENCE_H_

#include <string>

namespace kernelrl {

// `dev_dir` is "/dev" outside tests.
bool GpuDevicePresent(const std::string& dev_dir = "/dev");

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_GPU_PRESENCE_H_
