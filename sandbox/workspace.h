// Workspace validation: the first stage of every evaluation. A Workspace
// proto is untrusted input; this decides, without running anything, whether
// it is well-formed (paths, sizes, file types, includes) and which build
// layout it uses. Failures carry the Verdict outcome they map to
// (BAD_WORKSPACE, or SANDBOX_VIOLATION for forbidden includes), never a crash.
#ifndef KERNELRL_SANDBOX_WORKSPACE_H_
#define KERNELRL_SANDBOX_WORKSPACE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "sandbox/proto_types.h"
#include "sandbox/source_scan.h"
#include "proto/sandbox_config.pb.h"
#include "proto/task.pb.h"
#include "proto/verdict.pb.h"

namespace kernelrl::sandbox {

struct WorkspaceRejection {
  Verdict::Outcome outcome = Verdict::BAD_WORKSPACE;
  std::string reason;
};

struct ValidatedWorkspace {
  Workspace::Layout layout = Workspace::LAYOUT_UNSPECIFIED;
  std::vector<const WorkspaceFile*> files;  // points into the request
  std::string content_hash;                 // sha256 over sorted (path, content)
  std::vector<std::string> kernel_sources;  // kernels/*.cu or kernels/*.cc(pp)
};

// Validates `ws` for `backend` ("cuda" or "cpu"). On failure returns false and
// fills `rejection`.
bool ValidateWorkspace(const Workspace& ws, const WorkspaceLimits& limits, const std::string& backend,
                       ValidatedWorkspace* out, WorkspaceRejection* rejection);

// Writes the files under `dir` (created, must not exist). model.py from the
// workspace is never written: the frozen reference comes from the Task.
absl::Status MaterializeWorkspace(const ValidatedWorkspace& ws, const std::string& dir);

// The include lines a candidate may not use: ForbiddenIncludePrefixes() in
// sandbox/source_scan.h (with every other construct that reads a file).

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_WORKSPACE_H_
