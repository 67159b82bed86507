#include "sandbox/child_env.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kernelrl::sandbox {

const std::vector<std::string>& DefaultPassedNames() {
  // The interpreter's and the toolkit's search paths, and the switches that
  // keep NCCL and torch off NVLink multicast where the host forbids it.
  static const std::vector<std::string> kNames = {
      "PATH",      "HOME",       "PYTHONPATH",        "LD_LIBRARY_PATH",
      "CUDA_HOME", "TORCH_HOME", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
      "NVSHMEM_DISABLE_NVLS"};
  return kNames;
}

void ResolveChildEnvironment(v1::SandboxConfig* config, const EnvLookup& lookup) {
  v1::ChildEnvironment* env = config->mutable_child_env();
  if (env->pass().empty()) {
    for (const std::string& name : DefaultPassedNames()) env->add_pass(name);
  }
  for (const std::string& name : env->pass()) {
    if (env->set().count(name) > 0) continue;
    if (std::optional<std::string> value = lookup(name)) (*env->mutable_set())[name] = *value;
  }
}

void ApplyChildEnvironmentDefaults(v1::ChildEnvironment* env) {
  if (env->set().count("PATH") == 0) (*env->mutable_set())["PATH"] = "/usr/bin:/bin";
}

absl::Status CheckChildEnvironment(const v1::ChildEnvironment& env) {
  for (const auto& [name, value] : env.set()) {
    if (name.empty() || name.find_first_of(std::string("=\0", 2)) != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("SandboxConfig.child_env: bad variable name \"", name, "\""));
    }
    if (value.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("SandboxConfig.child_env: ", name, " holds a NUL byte"));
    }
  }
  for (const std::string& name : env.pass()) {
    if (name.empty() || name.find('=') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("SandboxConfig.child_env.pass: bad name \"", name, "\""));
    }
  }
  return absl::OkStatus();
}

std::string ChildEnvValue(const v1::ChildEnvironment& env, const std::string& name) {
  auto it = env.set().find(name);
  return it == env.set().end() ? "" : it->second;
}

std::vector<std::string> ChildEnvList(const v1::ChildEnvironment& env,
                                      const std::vector<std::pair<std::string, std::string>>& fixed) {
  std::map<std::string, std::string> all(env.set().begin(), env.set().end());
  for (const auto& [name, value] : fixed) all[name] = value;
  std::vector<std::string> out;
  for (const auto& [name, value] : all) out.push_back(absl::StrCat(name, "=", value));
  return out;
}

std::string DescribeChildEnvironment(const v1::ChildEnvironment& env) {
  return absl::StrJoin(ChildEnvList(env, {}), ", ");
}

}  // namespace kernelrl::sandbox
