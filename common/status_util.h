// absl::Status helpers: early-return macros and errno → Status with the
// failing call named, so every error says what failed and why.
#ifndef KERNELRL_COMMON_STATUS_UTIL_H_
#define KERNELRL_COMMON_STATUS_UTIL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kernelrl {

// "open(/etc/x): No such file or directory", code mapped from errno.
absl::Status ErrnoToStatus(int errno_value, absl::string_view what);

// Prefixes the message with context: "loading config: <original message>".
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace kernelrl

#define KR_CONCAT_INNER_(a, b) a##b
#define KR_CONCAT_(a, b) KR_CONCAT_INNER_(a, b)

#define KR_RETURN_IF_ERROR(expr)                    \
  do {                                              \
    ::absl::Status _kr_status = (expr);             \
    if (!_kr_status.ok()) return _kr_status;        \
  } while (0)

#define KR_ASSIGN_OR_RETURN(lhs, expr) \
  KR_ASSIGN_OR_RETURN_IMPL_(KR_CONCAT_(_kr_statusor_, __LINE__), lhs, expr)

#define KR_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                              \
  if (!statusor.ok()) return statusor.status();        \
  lhs = std::move(statusor).value()

#endif  // KERNELRL_COMMON_STATUS_UTIL_H_
