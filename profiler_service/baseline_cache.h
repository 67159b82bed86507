// BaselineCache: eager and torch.compile baselines on disk, one proto-text file
// per key (task hash, GPU model, torch version, input policy hash):
//   <root>/<gpu_model>/<torch_version>/<task_hash>_<input_policy_hash>.textproto
// (path components sanitised to [A-Za-z0-9._-]). Writes go to a temporary file
// renamed into place, so readers never see a partial entry and concurrent
// writers of one key leave one whole entry. Entries are never edited in
// place; a re-measurement replaces the file. Thread-safe (no shared state
// beyond the filesystem).
#ifndef KERNELRL_PROFILER_SERVICE_BASELINE_CACHE_H_
#define KERNELRL_PROFILER_SERVICE_BASELINE_CACHE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "profiler_service/proto_types.h"

namespace kernelrl {

struct BaselineKey {
  std::string task_hash;
  std::string gpu_model;
  std::string torch_version;
  std::string input_policy_hash;
};

class BaselineCache {
 public:
  explicit BaselineCache(std::string root) : root_(std::move(root)) {}

  // NotFound when there is no entry; DataLoss when the file does not parse.
  absl::StatusOr<Baseline> Get(const BaselineKey& key) const;
  // Stores `b` under the key its own fields name. Entries with an error are
  // stored too (recorded, not dropped) so a failing task is not re-measured
  // on every request; Get returns them and callers check Baseline.error.
  absl::Status Put(const Baseline& b) const;
  std::string PathFor(const BaselineKey& key) const;
  static BaselineKey KeyOf(const Baseline& b);

 private:
  std::string root_;
};

}  // namespace kernelrl

#endif  // KERNELRL_PROFILER_SERVICE_BASELINE_CACHE_H_
