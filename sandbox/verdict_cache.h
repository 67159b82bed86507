// VerdictCache: verdicts of identical candidates, replayed only when a fresh
// evaluation of the same bytes would pay at least as much. A learning run on a
// small design vocabulary submits the same workspace for the same task over
// and over; re-judging it costs a GPU verify + profile each time. The cache
// lives in the worker (trusted side): the key is the SHA-256 of the task and
// workspace bytes as the worker got them (skip_profile included), so a
// candidate cannot choose which verdict it is served.
//
// The rule (a candidate that flips a coin at import must not get its lucky
// verdict replayed):
//  * Every fresh evaluation of a key is recorded (Record), except INFRA_ERROR,
//    which says nothing about the bytes (and is never trained on).
//  * Two fresh verdicts agree when outcome, reward and quarantined are equal.
//    A fresh verdict that disagrees with any earlier one poisons the key: its
//    entry is dropped and the key joins the nondeterministic set, whose
//    requests are always evaluated fresh (nothing is ever served for them).
//    So a fresh non-OK after an OK (or the other way round) invalidates.
//  * An entry is served only once `min_confirmations` (>= 2) agreeing fresh
//    verdicts have been recorded since it was last spent, and then at most
//    `max_uses` times; after that it needs `min_confirmations` new agreeing
//    fresh verdicts (its history is kept, so a later disagreement still
//    poisons it).
//  * Only outcomes that are a property of the bytes are ever served: OK,
//    COMPILE_ERROR, WRONG_ANSWER, SANDBOX_VIOLATION, BAD_WORKSPACE. TIMEOUT,
//    CRASH, CUDA_ERROR and HACK_DETECTED (which a busy machine can cause) are
//    recorded, so they poison a key whose other verdicts differ, but never
//    replayed.
//  * What is served is the worst of the agreeing fresh verdicts: each
//    speed-up is the minimum, the candidate time and speed-of-light ratio the
//    maximum, the flags their union. The reward is the one they agree on.
// Hence a served verdict never pays more than some fresh evaluation of the
// same bytes did, and never after a fresh evaluation paid differently.
// Entries and poisoned keys are each bounded by `max_entries` (least recently
// recorded first out); an evicted poisoned key must be confirmed again from
// scratch. Off unless SandboxConfig.verdict_cache.max_entries > 0.
// Thread-safe: Lookup and Record take one mutex.
#ifndef KERNELRL_SANDBOX_VERDICT_CACHE_H_
#define KERNELRL_SANDBOX_VERDICT_CACHE_H_

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/sandbox.pb.h"
#include "proto/sandbox_config.pb.h"
#include "proto/verdict.pb.h"

namespace kernelrl::sandbox {

class VerdictCache {
 public:
  explicit VerdictCache(const v1::VerdictCacheConfig& config);

  bool enabled() const { return max_entries_ > 0; }
  int min_confirmations() const { return min_confirmations_; }
  // SHA-256 (hex) of the request's task, workspace and skip_profile, serialized deterministically.
  static std::string Key(const v1::EvaluateRequest& request);
  // The served verdict (worst of the agreeing fresh ones, `cached` set),
  // counting one use; nullopt while the key is unconfirmed, spent, poisoned or unknown.
  std::optional<v1::Verdict> Lookup(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Records a fresh verdict of `key` (its reward already set). Served copies
  // (`cached`) and INFRA_ERROR are ignored.
  void Record(const std::string& key, const v1::Verdict& fresh) ABSL_LOCKS_EXCLUDED(mu_);
  // Outcomes that may be served.
  static bool Servable(v1::Verdict::Outcome outcome);
  static bool Agree(const v1::Verdict& a, const v1::Verdict& b);

  struct Stats {
    int64_t hits = 0, misses = 0, entries = 0;
    int64_t poisoned = 0;  // keys in the nondeterministic set now
  };
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    v1::Verdict worst;         // what would be served
    int fresh = 0;             // agreeing fresh verdicts recorded, ever
    int since_spent = 0;       // of those, since the entry was last spent
    int uses = 0;              // times served since last spent
    std::list<std::string>::iterator order;
  };
  void Poison(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int max_entries_;
  const int max_uses_;
  const int min_confirmations_;
  mutable absl::Mutex mu_;
  std::unordered_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> order_ ABSL_GUARDED_BY(mu_);  // least recently recorded first
  std::unordered_map<std::string, std::list<std::string>::iterator> poisoned_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> poisoned_order_ ABSL_GUARDED_BY(mu_);
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_VERDICT_CACHE_H_
