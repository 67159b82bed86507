#ifndef KERNELRL_COMMON_GPU_LEASE_H_
#define KERNELRL_COMMON_GPU_LEASE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kernelrl {

// A host-wide lease on one GPU between the processes that share it: a
// sandbox worker timing kernels holds it exclusively, so that nothing else
// runs on the device inside its clock; the learner holds it shared around
// each decode and training step. Without it a learner on the sandbox's GPU
// gets every timed verdict declined (device_shared).
//
// Two flock(2)ed files, `path` and `path + ".turn"`. A holder of `path` in
// shared mode first passes through `.turn` (taken and dropped at once); an
// exclusive taker holds `.turn` while it waits for the shared holders to
// finish, so a stream of short shared holds cannot starve it; a shared taker
// that was already blocked on `path` when an exclusive one queued lets that one
// go first (it would otherwise win the release: flock wakes it, the exclusive
// taker polls), so a queue of exclusive holds passes from one to the next with
// no shared step between them to wait out (SharedQuietSince). flock(2) locks
// belong to open file descriptions and die with their process: each Hold
// opens its own descriptors (threads of one process do not share a hold),
// and a crashed holder frees the GPU.
//
// A shared holder stamps `path + ".shared_taken"` when granted and
// `path + ".shared_released"` as it lets go (the files' modification times):
// the driver goes on reporting a paused holder's kernels for a while after it
// stopped, and an exclusive holder asks SharedQuietSince from when to count.
class GpuLease {
 public:
  class Hold {
   public:
    Hold() = default;
    Hold(Hold&& other) noexcept : fd_(other.fd_), released_stamp_(std::move(other.released_stamp_)) { other.fd_ = -1; }
    Hold& operator=(Hold&& other) noexcept;
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    ~Hold() { Release(); }
    void Release();
    bool held() const { return fd_ >= 0; }

   private:
    friend class GpuLease;
    Hold(int fd, std::string released_stamp) : fd_(fd), released_stamp_(std::move(released_stamp)) {}
    int fd_ = -1;
    std::string released_stamp_;  // Stamped before letting go (shared holds); empty: none.
  };

  // An empty path is no lease: every hold is granted at once and holds nothing.
  explicit GpuLease(std::string path) : path_(std::move(path)) {}
  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

  // Block until granted. Errors: the lease files cannot be opened or locked.
  absl::StatusOr<Hold> Shared() const;
  // As Shared, exclusively; DeadlineExceeded when not granted within
  // `max_wait` (a holder stuck in its step must not stall the timer for good).
  absl::StatusOr<Hold> Exclusive(absl::Duration max_wait = absl::InfiniteDuration()) const;

  // For an exclusive holder granted at `granted`: the time since which no
  // shared holder has been in its step. The last shared release; `granted`
  // when the last stamp is a take (a holder died holding it: its work may
  // have run until the grant) or a stamp cannot be read; InfinitePast when
  // no shared hold was ever taken.
  absl::Time SharedQuietSince(absl::Time granted) const;

 private:
  absl::StatusOr<Hold> Take(bool exclusive, absl::Time deadline) const;
  std::string path_;
};

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_GPU_LEASE_H_
