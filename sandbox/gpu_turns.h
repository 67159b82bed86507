// GpuTurns: who may use one worker's GPU, and when.
//
// A clock must run with no other job's processes on the GPU: their work would
// slow it (a candidate could sabotage its siblings, or inflate a baseline), and
// the share check would decline it. Nothing else needs the GPU alone: a verify
// job's CUDA start, its input sets and comparisons run beside other jobs'.
//
//   kShared   verify-only jobs: beside each other and beside a profiling job's
//             verify phase.
//   kClocked  a job that profiles: one at a time (the clock token, held for the
//             whole job), shared until Turn::Alone(), which waits until every
//             shared turn has ended and holds new ones back. So while a clock
//             runs no other job has a process: the shared ones have ended, and
//             the next profiling job starts none before the token is free.
//   kAlone    the GPU to itself from the start (a worker with one zygote; the
//             start-up health probe).
#ifndef KERNELRL_SANDBOX_GPU_TURNS_H_
#define KERNELRL_SANDBOX_GPU_TURNS_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

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

    // The GPU to this job alone from now to its end: lets go of the shared hold and waits
    // for the others to end (a no-op when already alone). A kShared turn may call it too
    // (the health probe), but only a kClocked one keeps other profiling jobs out meanwhile.
    void Alone();
    bool alone() const { return alone_; }

   private:
    GpuTurns* const turns_;
    const bool clocked_;
    bool alone_;
  };

 private:
  absl::Mutex clock_mu_;  // the clock token; always taken before mu_
  absl::Mutex mu_;        // readers: shared turns; the writer: the GPU alone
};

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_GPU_TURNS_H_
