// The device memory the pipeline's workers share. Each candidate runs within
// a grant of it, and its worker caps itself to the grant (the CUDA caching
// allocator's per-process limit, data/harness/worker.py), so the grants that
// are out never add up to more than the device holds: a task that runs out of
// memory ran out within its own grant, never because of what the other
// workers were doing at the time.
//
// The budget is `units` equal shares (one per worker). A candidate starts with
// one; out of memory, it gives it back and asks for more (UnitsForAttempt:
// 1, 4, 16, ..., the last retry everything, i.e. alone on the device). Grants
// are served first come, first served, so a large request is not starved by
// the stream of one-unit requests behind it: those wait until it is served.
//
// Thread-safe.
#ifndef KERNELRL_DATA_MEMORY_BUDGET_H_
#define KERNELRL_DATA_MEMORY_BUDGET_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kernelrl {

class MemoryBudget {
 public:
  // bytes 0: not accounted (grants still order the retries; their byte size is 0, "no cap").
  MemoryBudget(int units, int64_t bytes);

  class Grant {
   public:
    Grant() = default;
    Grant(Grant&& o) noexcept { *this = std::move(o); }
    Grant& operator=(Grant&& o) noexcept;
    Grant(const Grant&) = delete;
    Grant& operator=(const Grant&) = delete;
    ~Grant() { Release(); }
    void Release();
    int units() const { return units_; }
    int64_t bytes() const;  // What the worker may use; 0 when the budget is not accounted.

   private:
    friend class MemoryBudget;
    MemoryBudget* budget_ = nullptr;
    int units_ = 0;
  };

  // Blocks until `units` (clamped to [1, total_units()]) are free and every
  // earlier request has been served.
  Grant Acquire(int units) ABSL_LOCKS_EXCLUDED(mu_);
  // Units of attempt `attempt` (0-based) when `retries` retries follow the first.
  int UnitsForAttempt(int attempt, int retries) const;
  int total_units() const { return units_; }
  int64_t unit_bytes() const { return bytes_ / units_; }
  int64_t bytes() const { return bytes_; }
  int free_units() const ABSL_LOCKS_EXCLUDED(mu_);
  int waiting() const ABSL_LOCKS_EXCLUDED(mu_);  // Requests not served yet.

 private:
  void Give(int units) ABSL_LOCKS_EXCLUDED(mu_);

  const int units_;
  const int64_t bytes_;
  mutable absl::Mutex mu_;
  int free_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t serving_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kernelrl

#endif  // KERNELRL_DATA_MEMORY_BUDGET_H_
