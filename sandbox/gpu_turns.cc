#include "sandbox/gpu_turns.h"

namespace kernelrl::sandbox {

GpuTurns::Turn::Turn(GpuTurns* turns, Kind kind) ABSL_NO_THREAD_SAFETY_ANALYSIS
    : turns_(turns), clocked_(kind == Kind::kClocked), alone_(kind == Kind::kAlone) {
  if (clocked_) turns_->clock_mu_.Lock();
  if (alone_) {
    turns_->mu_.Lock();
  } else {
    turns_->mu_.ReaderLock();
  }
}

GpuTurns::Turn::~Turn() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (alone_) {
    turns_->mu_.Unlock();
  } else {
    turns_->mu_.ReaderUnlock();
  }
  if (clocked_) turns_->clock_mu_.Unlock();
}

void GpuTurns::Turn::Alone() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (alone_) return;
  // Not an upgrade in place: two shared holders upgrading at once would wait for each other.
  // Between the two calls another shared turn may start, which the writer lock then waits for.
  turns_->mu_.ReaderUnlock();
  turns_->mu_.Lock();
  alone_ = true;
}

}  // namespace kernelrl::sandbox
