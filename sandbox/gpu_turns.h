// GpuTurns: who may use one worker's GPU, and when.
//
// A clock must run with no other job's processes on the GPU: their work would
// slow it (a candidate could sabotage its siblings, or inflate a baseline), and
// the share check would decline it. Nothing else needs the GPU alone: a job's
// CUDA start, its input sets and comparisons run beside other jobs'.
//
//   kShared   verify-only jobs, and a job that profiles until its candidate
//             imports its code: beside each other.
//   kClocked  a job that profiles: shared; Turn::Start() (before its candidate
//             imports its code) takes the clock token, one such job at a time, up
//             to its end; Turn::Alone() (its clock) waits until every shared
//             turn has ended and holds new ones back. So while a clock runs no
//             other job has a process on the GPU but ones still in our own code,
//             idle before their import: the shared ones have ended, and the next
//             profiling job imports nothing before the token is free.
//   kAlone    the GPU to itself from the start (a worker with one zygote; the
//             start-up health probe).
#ifndef KERNELRL_SANDBOX_GPU_TURNS_H_
#define KERNELRL_SANDBOX_GPU_TURNS_H_

#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kernelrl::sandbox {

class GpuTurns {
 public:
  enum class Kind { kShared, kClocked, kAlone };

  // Held for one job, from its start to its end (RAII; blocks until granted).
  class ABSL_SCOPED_LOCKABLE Turn {
   public:
    Turn(GpuTurns* turns, Kind kind) ABSL_SHARED_LOCK_FUNCTION(turns->mu_);
    ~Turn() ABSL_UNLOCK_FUNCTION();
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;

    // The clock token, for a kClocked turn (a no-op for others, or once held): lets go of the
    // shared hold meanwhile (the token is always taken first). False when another profiling
    // job held it for longer than `wait` (the shared hold is back either way).
    // `first`, where given, runs before the token with no shared hold (in every kind of turn;
    // a kAlone one keeps its hold): a wait that every profiling job takes before its token (the
    // GPU lease, evaluator.cc), and that a shared hold would deadlock with the holder's Alone();
    // false from it: no token, Start returns false.
    bool Start(absl::Duration wait, const std::function<bool()>& first = nullptr);
    // The GPU to this job alone from now to its end: lets go of the shared hold and waits
    // for the others to end (a no-op when already alone). A kShared turn may call it too
    // (the health probe).
    void Alone();
    bool alone() const { return alone_; }

   private:
    GpuTurns* const turns_;
    const bool clocked_;
    bool started_ = false;  // holds the clock token
    bool alone_;
  };

 private:
  // The clock token: waited for with no turn held, so always before mu_.
  absl::Mutex token_mu_;
  bool token_held_ ABSL_GUARDED_BY(token_mu_) = false;
  absl::Mutex mu_;  // readers: shared turns; the writer: the GPU alone
};

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_GPU_TURNS_H_
