#include "sandbox/contain/view_defaults.h"

namespace kernelrl::sandbox {

const std::vector<std::string>& DefaultGpuDevPaths() {
  static const auto* v = new std::vector<std::string>{
      "/dev/nvidiactl",     "/dev/nvidia-uvm",  "/dev/nvidia-uvm-tools",
      "/dev/nvidia-modeset", "/dev/nvidia-caps", "/dev/nvidia[0-9]*"};
  return *v;
}

const std::vector<std::string>& DefaultGpuRoPaths() {
  static const auto* v = new std::vector<std::string>{"/sys/bus/pci", "/sys/devices", "/sys/module/nvidia",
                                                      "/sys/module/nvidia_uvm", "/run/nvidia-persistenced"};
  return *v;
}

}  // namespace kernelrl::sandbox
