// The one read of the worker's own environment for its children
// (sandbox/child_env.h); linked by the binaries' mains and by tests.
#include <cstdlib>

#include "sandbox/child_env.h"

namespace kernelrl::sandbox {

void ResolveChildEnvironmentFromHost(v1::SandboxConfig* config) {
  ResolveChildEnvironment(config, [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    return v == nullptr ? std::nullopt : std::optional<std::string>(v);
  });
}

}  // namespace kernelrl::sandbox
