// RunContained / StartContained: execute a program (nvcc, g++, the Python
// zygote) inside the isolation sequence of contain.h, with a wall-clock
// watchdog and capped output capture. The child's step log comes back through
// a close-on-exec pipe, so the caller sees which protections were applied.
#ifndef KERNELRL_SANDBOX_CONTAIN_SPAWN_H_
#define KERNELRL_SANDBOX_CONTAIN_SPAWN_H_

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/contain/contain.h"
#include "sandbox/contain/policy.h"

namespace kernelrl::sandbox {

struct SpawnOptions {
  std::vector<std::string> argv;        // argv[0] is looked up in PATH
  std::vector<std::string> env;         // full environment, "K=V"
  std::string cwd;
  KrPolicy policy = {};                 // string fields must outlive the call
  double wall_seconds = 60;
  size_t max_output_bytes = 1 << 20;    // per stream; the rest is dropped
  // A step that failed makes the child exit 126 before exec when true.
  bool fail_on_degraded = false;
  // Parent fds given to the child as the paired child fd numbers.
  std::vector<std::pair<int, int>> pass_fds;  // {parent_fd, child_fd}
};

struct SpawnResult {
  SuperviseResult status;
  std::string stdout_text;
  std::string stderr_text;
  bool output_truncated = false;
  std::string contain_log;  // the child's StepLog
};

absl::StatusOr<SpawnResult> RunContained(const SpawnOptions& opts);

// A long-lived contained child (the zygote). stdin/stdout are pipes owned by
// the caller; stderr goes to `stderr_path`.
struct ContainedProcess {
  pid_t pid = -1;
  int stdin_fd = -1;   // write jobs here
  int stdout_fd = -1;  // read results here
  std::string contain_log;
};
absl::StatusOr<ContainedProcess> StartContained(const SpawnOptions& opts,
                                                const std::string& stderr_path);

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_CONTAIN_SPAWN_H_
