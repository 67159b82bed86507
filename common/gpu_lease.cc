#include "common/gpu_lease.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kernelrl {
namespace {

absl::StatusOr<int> OpenLockFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("gpu lease: cannot open ", path, ": ", std::strerror(errno)));
  return fd;
}

absl::Status Lock(int fd, int op, const std::string& path) {
  while (::flock(fd, op) != 0) {
    if (errno == EINTR) continue;
    return absl::UnavailableError(absl::StrCat("gpu lease: cannot lock ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

GpuLease::Hold& GpuLease::Hold::operator=(Hold&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void GpuLease::Hold::Release() {
  if (fd_ >= 0) ::close(fd_);  // Closing the last descriptor drops the lock.
  fd_ = -1;
}

absl::StatusOr<GpuLease::Hold> GpuLease::Shared() const { return Take(false); }
absl::StatusOr<GpuLease::Hold> GpuLease::Exclusive() const { return Take(true); }

absl::StatusOr<GpuLease::Hold> GpuLease::Take(bool exclusive) const {
  if (!enabled()) return Hold();
  const std::string turn_path = path_ + ".turn";
  auto turn = OpenLockFile(turn_path);
  if (!turn.ok()) return turn.status();
  Hold turn_hold(*turn);
  if (absl::Status s = Lock(*turn, LOCK_EX, turn_path); !s.ok()) return s;
  if (!exclusive) turn_hold.Release();  // Only passing through: a waiting exclusive taker holds it.
  auto main = OpenLockFile(path_);
  if (!main.ok()) return main.status();
  Hold hold(*main);
  if (absl::Status s = Lock(*main, exclusive ? LOCK_EX : LOCK_SH, path_); !s.ok()) return s;
  return hold;
}

}  // namespace kernelrl
