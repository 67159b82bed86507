// Sha256Hex: SHA-256 of a byte string as lower-case hex, from libcrypto
// (OpenSSL). Keys the sandbox's compile cache and workspace identity and the
// profiler's task hash (profiler_service/task_key.h); one definition so both
// sides of the reward path hash alike without depending on each other.
#ifndef KERNELRL_COMMON_SHA256_H_
#define KERNELRL_COMMON_SHA256_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kernelrl {

std::string Sha256Hex(std::string_view data);
// The same of a file's bytes, read in chunks (a 7B model's weights do not fit a string twice).
absl::StatusOr<std::string> Sha256FileHex(const std::string& path);

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_SHA256_H_
