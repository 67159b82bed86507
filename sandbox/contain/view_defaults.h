// Defaults of SandboxConfig.view (proto/sandbox_config.proto), in one place:
// what a GPU job's constructed root adds to its /dev and to its read-only
// binds. The worker resolves its config against these
// (sandbox/filesystem_view.h) and hands the zygote the result; a harness
// started without one (tools/device_confine.sh) reads them from
// libkernelrl_contain.so (kr_default_view, sandbox/harness/contain.py).
#ifndef KERNELRL_SANDBOX_CONTAIN_VIEW_DEFAULTS_H_
#define KERNELRL_SANDBOX_CONTAIN_VIEW_DEFAULTS_H_

#include <string>
#include <vector>

namespace kernelrl::sandbox {

// Device nodes CUDA and NVML open, as nvidia-container-toolkit gives a
// container (nvidia-caps for MIG; one node per GPU, a glob pattern).
// nvidia-uvm-tools: drivers >= 570 open it during UVM initialisation and fail
// cuInit with error 304 when they cannot.
const std::vector<std::string>& DefaultGpuDevPaths();

// The driver's sysfs entries CUDA and NVML read (PCI topology, module
// parameters) and the persistence daemon's socket dir. /proc/driver/nvidia
// comes with the root's fresh /proc; the user-space libraries (libcuda,
// libnvidia-*) live under /usr, always in the view.
const std::vector<std::string>& DefaultGpuRoPaths();

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_CONTAIN_VIEW_DEFAULTS_H_
