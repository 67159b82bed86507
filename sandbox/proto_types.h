// The kernelrl.v1 messages the sandbox core uses, named without the package.
#ifndef KERNELRL_SANDBOX_PROTO_TYPES_H_
#define KERNELRL_SANDBOX_PROTO_TYPES_H_

#include "proto/sandbox.pb.h"
#include "proto/sandbox_config.pb.h"
#include "proto/task.pb.h"
#include "proto/verdict.pb.h"

namespace kernelrl::sandbox {

using v1::CompileDiagnostic;
using v1::CompileLimits;
using v1::EvaluateRequest;
using v1::InputPolicy;
using v1::SandboxConfig;
using v1::StageTiming;
using v1::Task;
using v1::TolerancePolicy;
using v1::Verdict;
using v1::VerifyLimits;
using v1::Workspace;
using v1::WorkspaceFile;
using v1::WorkspaceLimits;

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_PROTO_TYPES_H_
