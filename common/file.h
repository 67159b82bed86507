// Whole-file helpers shared by every service: read a file into a string, and
// replace a file atomically (write a temporary, fsync, rename, fsync the
// directory) so a reader never sees a partial file.
#ifndef KERNELRL_COMMON_FILE_H_
#define KERNELRL_COMMON_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kernelrl {

// NotFound when the file does not exist; other failures name the syscall.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);
// Write to path.tmp.<pid>, fsync, rename over path, fsync the directory.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);
absl::Status FsyncDir(const std::string& dir);

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_FILE_H_
