// Reading tasks and workspaces from local files (CLI, tests, benchmarks).
#ifndef KERNELRL_SANDBOX_WORKSPACE_FILES_H_
#define KERNELRL_SANDBOX_WORKSPACE_FILES_H_

#include <string>

#include "absl/status/statusor.h"
#include "sandbox/proto_types.h"
#include "proto/task.pb.h"

namespace kernelrl::sandbox {

// Every regular file under `dir` (relative paths). Links to files are read
// through (Bazel runfiles); links to directories are an error.
absl::StatusOr<Workspace> ReadWorkspaceDir(const std::string& dir);
// A KernelBench task file (Model, get_inputs, get_init_inputs) as a Task.
absl::StatusOr<Task> ReadTaskFile(const std::string& path, const std::string& id);

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_WORKSPACE_FILES_H_
