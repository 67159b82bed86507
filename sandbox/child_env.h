// The environment of the sandbox's children (SandboxConfig.child_env): the
// compiler, the zygote and everything the zygote forks see only what the
// config says, never the worker's environment directly.
//
// The one place the host environment is read is ResolveChildEnvironment,
// called once by each binary's main (sandbox_main, sandbox_cli,
// measure_baselines) and by tests that stand in for a main; the cores
// (CompileStage, VerifyStage, Evaluator) read the resolved `set` only.
#ifndef KERNELRL_SANDBOX_CHILD_ENV_H_
#define KERNELRL_SANDBOX_CHILD_ENV_H_

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "proto/sandbox_config.pb.h"

namespace kernelrl::sandbox {

// Returns the value of an environment variable, nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// The names passed through when ChildEnvironment.pass is empty.
const std::vector<std::string>& DefaultPassedNames();

// Copies each passed name (DefaultPassedNames() when `pass` is empty) that
// `lookup` finds into `set`, unless `set` names it already; `pass` is then
// filled with the names used, so the effective config shows them.
void ResolveChildEnvironment(v1::SandboxConfig* config, const EnvLookup& lookup);
// ResolveChildEnvironment over the process's own environment (getenv).
void ResolveChildEnvironmentFromHost(v1::SandboxConfig* config);

// PATH "/usr/bin:/bin" when unset (part of the evaluator's WithDefaults).
void ApplyChildEnvironmentDefaults(v1::ChildEnvironment* env);
// Every name non-empty, without '=' or NUL; no value with NUL.
absl::Status CheckChildEnvironment(const v1::ChildEnvironment& env);

// The value of `name` in `set`, "" when unset.
std::string ChildEnvValue(const v1::ChildEnvironment& env, const std::string& name);
// "NAME=value" for execve: `set`, then the stage's own `fixed` variables
// (which replace a same-named one), sorted by name.
std::vector<std::string> ChildEnvList(const v1::ChildEnvironment& env,
                                      const std::vector<std::pair<std::string, std::string>>& fixed);
// "NAME=value, ..." sorted by name, for Info() and the start log.
std::string DescribeChildEnvironment(const v1::ChildEnvironment& env);

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_CHILD_ENV_H_
