// Whole-file helpers shared by every service: read a file into a string, and
// replace a file atomically (write a temporary, fsync, rename, fsync the
// directory) so a reader never sees a partial file.
#ifndef KERNELRL_COMMON_FILE_H_
#define KERNELRL_COMMON_FILE_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kernelrl {

// NotFound when the file does not exist; other failures name the syscall.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);
// Write to path.tmp.<pid>, fsync, rename over path, fsync the directory.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);
absl::Status FsyncDir(const std::string& dir);
// Removes `path` and everything under it, never following a symlink (the
// link itself is removed): sandbox job and build trees hold whatever a
// candidate or compiler left, links pointing anywhere and directories chmod
// 000 included (those are made 0700 first). OK when `path` does not exist.
// Refuses "/" and paths shorter than 8 characters as a guard against a
// mis-built path.
absl::Status RemoveTree(const std::string& path);

// mkdir that accepts an existing directory (its mode is left as it is); any
// other failure names the path and keeps the errno's code.
absl::Status MakeDir(const std::string& path, mode_t mode);

// The names in `dir` but "." and "..", sorted; empty when it cannot be read.
std::vector<std::string> ListDir(const std::string& dir);

// Writes all of `data` to `fd` (retrying short writes and EINTR); `path` names it in errors.
absl::Status WriteAll(int fd, absl::string_view data, const std::string& path);

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_FILE_H_
