// RolloutWorkspace: the scratch directory of one rollout, and the only way
// the file tools reach it.
//
// Layout: <root>/<128-bit random hex>/ws   the agent's workspace (model.py,
//                                          SKILL.md, what it writes)
//         <root>/<same>/ctl                the actor's private files (shell
//                                          stderr, background job output)
// Contract:
//  * Every path the model names is resolved beneath ws: absolute paths, ".."
//    and symlinks leaving ws are refused (openat2 RESOLVE_BENEATH, so a link
//    the agent made with Bash cannot lead a Read/Write outside).
//  * The destructor removes the whole rollout directory.
//  * Snapshot() is what the sandbox evaluates: model_new.py, kernels/** and
//    source files at the top level (never model.py or SKILL.md, which the
//    sandbox provides itself from the task).
// Not thread-safe: one rollout, one thread.
#ifndef KERNELRL_ACTOR_WORKSPACE_H_
#define KERNELRL_ACTOR_WORKSPACE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/task.pb.h"

namespace kernelrl::actor {

class RolloutWorkspace {
 public:
  // Creates the directories and writes model.py (the task's reference) and SKILL.md.
  static absl::StatusOr<std::unique_ptr<RolloutWorkspace>> Create(const std::string& root,
                                                                  const std::string& reference_source,
                                                                  const std::string& skill_text);
  ~RolloutWorkspace();
  RolloutWorkspace(const RolloutWorkspace&) = delete;
  RolloutWorkspace& operator=(const RolloutWorkspace&) = delete;

  const std::string& dir() const { return ws_; }        // Absolute path of ws.
  const std::string& control_dir() const { return ctl_; }
  const std::string& rollout_dir() const { return top_; }

  // Checks a model-given relative path; returns it normalized ("a/b.cu").
  absl::StatusOr<std::string> Normalize(const std::string& path) const;
  // File contents; NotFound / InvalidArgument worded for the model.
  absl::StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes) const;
  bool Exists(const std::string& path) const;
  // Atomic replace (temporary + rename), creating parent directories.
  absl::Status WriteFile(const std::string& path, const std::string& content, int64_t max_bytes);
  // Every regular file beneath ws (relative, sorted), symlinks not followed.
  std::vector<std::string> ListFiles() const;

  v1::Workspace Snapshot() const;

 private:
  RolloutWorkspace(std::string top, std::string ws, std::string ctl, int ws_fd);
  // An fd for `rel` opened beneath ws (flags as for open); -1 with errno.
  int OpenBeneath(const std::string& rel, int flags, int mode = 0) const;

  const std::string top_, ws_, ctl_;
  const int ws_fd_;
};

}  // namespace kernelrl::actor

#endif  // KERNELRL_ACTOR_WORKSPACE_H_
