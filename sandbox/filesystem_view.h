// SandboxConfig.view (proto/sandbox_config.proto) resolved against its
// defaults (sandbox/contain/view_defaults.h) and checked: the host paths the
// constructed root holds beyond the system, the Python install and the
// toolchain. The verify stage hands the result to the zygote on its command
// line (ZygoteViewArgs); the compile stage adds extra_ro to the compiler's view.
#ifndef KERNELRL_SANDBOX_FILESYSTEM_VIEW_H_
#define KERNELRL_SANDBOX_FILESYSTEM_VIEW_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/proto_types.h"

namespace kernelrl::sandbox {

struct ResolvedView {
  std::vector<std::string> extra_ro;  // every job, compile included
  std::vector<std::string> gpu_dev;   // CUDA jobs' /dev (glob patterns kept)
  std::vector<std::string> gpu_ro;    // CUDA jobs' driver sysfs/run entries
  std::vector<std::string> warnings;  // "<field>: <path> ..." for paths the host lacks
};

// InvalidArgument naming the field and the path for a relative path, "/",
// a ".." component or a ':' (the lists travel ':'-joined). A path (or glob
// pattern) with nothing on this host is kept out of nothing but warned about:
// the root plan leaves missing paths out and lists them in the contain log.
// The GPU lists are resolved and checked only on the CUDA backend.
absl::StatusOr<ResolvedView> ResolveFilesystemView(const SandboxConfig& config);

// The zygote's arguments (--view-extra-ro, --view-gpu-dev, --view-gpu-ro,
// each ':'-joined); logs the warnings. Errors as ResolveFilesystemView.
absl::StatusOr<std::vector<std::string>> ZygoteViewArgs(const SandboxConfig& config);

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_FILESYSTEM_VIEW_H_
