#include "common/gpu_lease.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace kernelrl {
namespace {

absl::StatusOr<int> OpenLockFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("gpu lease: cannot open ", path, ": ", std::strerror(errno)));
  return fd;
}

// Blocks in flock(2) without a deadline; with one, polls it (LOCK_NB) every
// millisecond or two until then.
absl::Status Lock(int fd, int op, const std::string& path, absl::Time deadline) {
  const bool wait_forever = deadline == absl::InfiniteFuture();
  while (::flock(fd, wait_forever ? op : op | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK || wait_forever) {
      return absl::UnavailableError(absl::StrCat("gpu lease: cannot lock ", path, ": ", std::strerror(errno)));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("gpu lease: ", path, " not granted in time (a holder is still "
                                                      "in its step)"));
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  return absl::OkStatus();
}

// Sets `path`'s modification time to now (the real-time clock, to the
// nanosecond: the kernel's own file times are coarser). A stamp that fails
// reads as a missing or older one: SharedQuietSince then errs towards the grant.
void Stamp(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return;
  struct timespec now[2];
  ::clock_gettime(CLOCK_REALTIME, &now[0]);
  now[1] = now[0];
  (void)::futimens(fd, now);
  ::close(fd);
}

std::optional<absl::Time> StampOf(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return absl::TimeFromTimespec(st.st_mtim);
}

// Whether someone holds `turn_path` now: an exclusive taker waiting (or, for a
// moment, a shared one passing through).
bool TurnTaken(const std::string& turn_path) {
  const int fd = ::open(turn_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return false;
  const bool taken = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return taken;
}

}  // namespace

GpuLease::Hold& GpuLease::Hold::operator=(Hold&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = other.fd_;
    released_stamp_ = std::move(other.released_stamp_);
    other.fd_ = -1;
  }
  return *this;
}

void GpuLease::Hold::Release() {
  if (fd_ >= 0) {
    // Stamped while still held, so that an exclusive taker granted after it sees it.
    if (!released_stamp_.empty()) Stamp(released_stamp_);
    ::close(fd_);  // Closing the last descriptor drops the lock.
  }
  fd_ = -1;
}

absl::StatusOr<GpuLease::Hold> GpuLease::Shared() const { return Take(false, absl::InfiniteFuture()); }

absl::StatusOr<GpuLease::Hold> GpuLease::Exclusive(absl::Duration max_wait) const {
  return Take(true, max_wait == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + max_wait);
}

absl::StatusOr<GpuLease::Hold> GpuLease::Take(bool exclusive, absl::Time deadline) const {
  if (!enabled()) return Hold();
  const std::string turn_path = path_ + ".turn";
  for (;;) {
    auto turn = OpenLockFile(turn_path);
    if (!turn.ok()) return turn.status();
    Hold turn_hold(*turn, "");
    if (absl::Status s = Lock(*turn, LOCK_EX, turn_path, deadline); !s.ok()) return s;
    if (!exclusive) turn_hold.Release();  // Only passing through: a waiting exclusive taker holds it.
    auto main = OpenLockFile(path_);
    if (!main.ok()) return main.status();
    Hold hold(*main, "");
    if (absl::Status s = Lock(*main, exclusive ? LOCK_EX : LOCK_SH, path_, deadline); !s.ok()) return s;
    if (exclusive) return hold;
    // A shared taker blocked on `path` since before an exclusive one queued would win
    // the release (flock wakes it; the exclusive taker polls): it lets that one go first,
    // straight from the holder before it, which then has no step of ours to wait out.
    if (TurnTaken(turn_path)) {
      hold.Release();  // Nothing ran under it: no stamp.
      continue;
    }
    Stamp(path_ + ".shared_taken");
    hold.released_stamp_ = path_ + ".shared_released";
    return hold;
  }
}

absl::Time GpuLease::SharedQuietSince(absl::Time granted) const {
  if (!enabled()) return absl::InfinitePast();
  const std::optional<absl::Time> taken = StampOf(path_ + ".shared_taken");
  const std::optional<absl::Time> released = StampOf(path_ + ".shared_released");
  if (!taken && !released) return absl::InfinitePast();
  if (!released || (taken && *taken > *released)) return granted;
  return std::min(*released, granted);
}

}  // namespace kernelrl
