// VerdictCache: verdicts of identical candidates, reused a bounded number of
// times. A learning run on a small design vocabulary submits the same
// workspace for the same task over and over; re-judging it costs a GPU
// verify + profile each time. The cache lives in the worker (trusted side):
// the key is the SHA-256 of the task and workspace bytes as the worker got
// them, so a candidate cannot choose which verdict it is served. Only
// outcomes that are a property of the bytes are kept (not TIMEOUT, CRASH,
// CUDA_ERROR or INFRA_ERROR, which can be the machine's, nor HACK_DETECTED,
// which can come from a timing bound measured on a busy machine), and each entry is
// served `max_uses` times, then the candidate is judged afresh (timing noise
// and any nondeterminism are sampled again). Off unless
// SandboxConfig.verdict_cache.max_entries > 0.
#ifndef KERNELRL_SANDBOX_VERDICT_CACHE_H_
#define KERNELRL_SANDBOX_VERDICT_CACHE_H_

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>

#include "absl/synchronization/mutex.h"
#include "proto/sandbox.pb.h"
#include "proto/sandbox_config.pb.h"
#include "proto/verdict.pb.h"

namespace kernelrl::sandbox {

class VerdictCache {
 public:
  explicit VerdictCache(const v1::VerdictCacheConfig& config);

  bool enabled() const { return max_entries_ > 0; }
  // SHA-256 (hex) of the request's task, workspace and skip_profile, serialized deterministically.
  static std::string Key(const v1::EvaluateRequest& request);
  // A copy of the stored verdict with `cached` set, counting one use; nullopt on a miss.
  std::optional<v1::Verdict> Lookup(const std::string& key);
  // Stores a cacheable verdict (evicting the least recently stored entry when full).
  void Store(const std::string& key, const v1::Verdict& verdict);
  static bool Cacheable(const v1::Verdict& verdict);

  struct Stats {
    int64_t hits = 0, misses = 0, entries = 0;
  };
  Stats stats() const;

 private:
  struct Entry {
    v1::Verdict verdict;
    int uses = 0;
    std::list<std::string>::iterator order;
  };
  const int max_entries_;
  const int max_uses_;
  mutable absl::Mutex mu_;
  std::unordered_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> order_ ABSL_GUARDED_BY(mu_);  // oldest stored first
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_VERDICT_CACHE_H_
