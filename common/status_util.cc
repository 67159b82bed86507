#include "common/status_util.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kernelrl {

absl::Status ErrnoToStatus(int errno_value, absl::string_view what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(errno_value));
  switch (errno_value) {
    case ENOENT: return absl::NotFoundError(message);
    case EACCES:
    case EPERM: return absl::PermissionDeniedError(message);
    case EEXIST: return absl::AlreadyExistsError(message);
    case EINVAL: return absl::InvalidArgumentError(message);
    case EADDRINUSE: return absl::UnavailableError(message);
    case ENOMEM:
    case ENOSPC: return absl::ResourceExhaustedError(message);
    case ETIMEDOUT: return absl::DeadlineExceededError(message);
    default: return absl::InternalError(message);
  }
}

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

}  // namespace kernelrl
