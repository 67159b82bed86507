// CompileStage: builds a validated workspace into an artifact directory on
// the CPU, in a contained child process (no network, read-only filesystem
// except its output, CPU/wall/memory/output-size limits, compiler seccomp
// profile). Results are cached by content hash (sources + layout + flags +
// toolchain), so resubmitting the same kernels costs nothing; at most
// `max_parallel` builds run at once, the rest wait.
//
// Artifact directory contents: manifest.json, plus kernels.so (FAST_PATH /
// CPU) or the torch extension build (TORCH_EXTENSION / SINGLE_FILE_INLINE).
#ifndef KERNELRL_SANDBOX_COMPILE_STAGE_H_
#define KERNELRL_SANDBOX_COMPILE_STAGE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "sandbox/proto_types.h"
#include "proto/sandbox_config.pb.h"
#include "proto/verdict.pb.h"
#include "sandbox/workspace.h"

namespace kernelrl::sandbox {

struct CompileResult {
  bool ok = false;
  Verdict::Outcome failure = Verdict::COMPILE_ERROR;  // when !ok
  std::string summary;
  std::vector<CompileDiagnostic> diagnostics;
  std::string log;           // compiler output tail
  std::string artifact_dir;  // where the built artifacts are (cache entry)
  bool cache_hit = false;
  double wall_ms = 0;
  double cpu_ms = 0;
};

class CompileStage {
 public:
  // `harness_dir` holds build_ext.py; `contain_caps` is the host probe result.
  CompileStage(const SandboxConfig& config, std::string harness_dir, int contain_caps);

  // Builds `ws` (already materialised at `workspace_dir`). Returns an error
  // status only for infrastructure faults (disk full...); candidate faults
  // come back as CompileResult{ok = false}.
  absl::StatusOr<CompileResult> Compile(const ValidatedWorkspace& ws, const std::string& workspace_dir);

  // The compile command for a layout, exposed for the benchmark and tests.
  std::vector<std::string> Command(const ValidatedWorkspace& ws, const std::string& workspace_dir,
                                   const std::string& out_dir) const;

  int in_flight() const;
  int waiting() const;

 private:
  std::string CacheKey(const ValidatedWorkspace& ws) const;
  absl::StatusOr<CompileResult> Build(const ValidatedWorkspace& ws, const std::string& workspace_dir,
                                      const std::string& final_dir);

  const SandboxConfig config_;
  const std::string harness_dir_;
  const int caps_;
  const std::string cache_dir_;
  const int max_parallel_;
  mutable absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_COMPILE_STAGE_H_
