#include "common/gpu_presence.h"

#include <dirent.h>

#include <cctype>
#include <cstring>

namespace kernelrl {

bool GpuDevicePresent(const std::string& dev_dir) {
  DIR* d = opendir(dev_dir.c_str());
  if (d == nullptr) return false;
  bool found = false;
  // One node per GPU: "nvidia" followed by digits only (nvidiactl,
  // nvidia-uvm and nvidia-caps exist without a usable GPU too).
  while (dirent* e = readdir(d)) {
    const char* name = e->d_name;
    if (std::strncmp(name, "nvidia", 6) != 0 || name[6] == '\0') continue;
    bool digits = true;
    for (const char* p = name + 6; *p != '\0'; ++p) digits &= std::isdigit(static_cast<unsigned char>(*p)) != 0;
    if (digits) {
      found = true;
      break;
    }
  }
  closedir(d);
  return found;
}

}  // namespace kernelrl
