#include "sandbox/gpu_turns.h"

namespace kernelrl::sandbox {

GpuTurns::Turn::Turn(GpuTurns* turns, Kind kind) ABSL_NO_THREAD_SAFETY_ANALYSIS
    : turns_(turns), clocked_(kind == Kind::kClocked), alone_(kind == Kind::kAlone) {
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
  if (started_) {
    absl::MutexLock l(&turns_->token_mu_);
    turns_->token_held_ = false;
  }
}

bool GpuTurns::Turn::Start(absl::Duration wait, const std::function<bool()>& first) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (alone_) return !first || first();  // The GPU is this job's alone already: no one to wait beside.
  // Waiting (for `first` or the token) while holding a shared turn would deadlock with the holder's Alone().
  turns_->mu_.ReaderUnlock();
  bool ok = !first || first();
  if (ok && clocked_ && !started_) {
    absl::MutexLock l(&turns_->token_mu_);
    started_ = turns_->token_mu_.AwaitWithTimeout(
        absl::Condition(+[](bool* held) { return !*held; }, &turns_->token_held_), wait);
    if (started_) turns_->token_held_ = true;
    ok = started_;
  }
  turns_->mu_.ReaderLock();
  return ok;
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
