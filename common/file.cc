#include "common/file.h"

#include <algorithm>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_util.h"

namespace kernelrl {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  return ErrnoToStatus(errno, absl::StrCat(what, " ", path));
}

std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Removes `name` in the directory `parent_fd`; `path` names it in errors.
absl::Status RemoveAt(int parent_fd, const char* name, const std::string& path) {
  if (::unlinkat(parent_fd, name, 0) == 0 || errno == ENOENT) return absl::OkStatus();
  if (errno != EISDIR) return Errno("unlink", path);
  constexpr int kFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::openat(parent_fd, name, kFlags);
  if (fd < 0 && errno == EACCES && ::fchmodat(parent_fd, name, 0700, 0) == 0) fd = ::openat(parent_fd, name, kFlags);
  if (fd < 0) return Errno("open dir", path);
  ::fchmod(fd, 0700);  // entries can only be removed from a writable directory
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return Errno("fdopendir", path);
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  }
  absl::Status status;
  for (const std::string& n : names) {
    status.Update(RemoveAt(::dirfd(d), n.c_str(), path + "/" + n));
  }
  ::closedir(d);
  if (status.ok() && ::unlinkat(parent_fd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
    return Errno("rmdir", path);
  }
  return status;
}

}  // namespace

absl::Status MakeDir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) return Errno("mkdir", path);
  return absl::OkStatus();
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t w = ::write(fd, data.data(), data.size());
    if (w < 0) {
      if (errno == EINTR) continue;
      return Errno("write", path);
    }
    data.remove_prefix(static_cast<size_t>(w));
  }
  return absl::OkStatus();
}

absl::Status RemoveTree(const std::string& path) {
  if (path.size() < 8 || path.find_first_not_of('/') == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("refusing to remove the tree at '", path, "'"));
  }
  return RemoveAt(AT_FDCWD, path.c_str(), path);
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return errno == ENOENT ? absl::NotFoundError(absl::StrCat("file not found: ", path)) : Errno("open", path);
  }
  std::string out;
  char buf[1 << 16];
  while (true) {
    ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return Errno("read", path);
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return out;
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("create", tmp);
  absl::Status s = WriteAll(fd, contents, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = Errno("fsync", tmp);
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = Errno("rename to", path);
  if (!s.ok()) ::unlink(tmp.c_str());
  if (s.ok()) s = FsyncDir(Dirname(path));
  return s;
}

absl::Status FsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("open dir", dir);
  int r = ::fsync(fd);
  ::close(fd);
  if (r != 0) return Errno("fsync dir", dir);
  return absl::OkStatus();
}

}  // namespace kernelrl
