// Small path helpers shared by the mount steps (mounts.cc, root_plan.cc,
// root.cc). libc + std only: they run in freshly forked children.
#ifndef KERNELRL_SANDBOX_CONTAIN_PATH_UTIL_H_
#define KERNELRL_SANDBOX_CONTAIN_PATH_UTIL_H_

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <linux/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace kernelrl::sandbox {

// "a:b::c" -> {"a", "b", "c"}; NULL -> {}.
inline std::vector<std::string> SplitColons(const char* s) {
  std::vector<std::string> out;
  if (s == nullptr) return out;
  std::string cur;
  for (const char* c = s; *c; ++c) {
    if (*c == ':') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += *c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// True when `path` is `dir` or lies below it (both canonical, no trailing '/').
inline bool IsUnder(const std::string& path, const std::string& dir) {
  if (dir == "/") return true;
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
                         path[dir.size()] == '/');
}

// mkdir -p of `path` (absolute) inside the tree at `root_fd`, new directories
// `mode`, one component at a time with O_NOFOLLOW: a link in the tree is never
// followed, so nothing is ever created outside it. An O_PATH fd of `path`, or
// -1 with errno.
inline int OpenDirsIn(int root_fd, const std::string& path, bool create, mode_t mode) {
  int fd = dup(root_fd);
  size_t pos = 1;
  while (fd >= 0 && pos < path.size()) {
    size_t next = path.find('/', pos);
    if (next == std::string::npos) next = path.size();
    const std::string name = path.substr(pos, next - pos);
    pos = next + 1;
    if (name.empty()) continue;
    if (create && mkdirat(fd, name.c_str(), mode) != 0 && errno != EEXIST) {
      close(fd);
      return -1;
    }
    int sub = openat(fd, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    close(fd);
    fd = sub;
  }
  return fd;
}

// Job dirs are created by the worker (root, mode 0700): the sandbox identity
// must own them to write there. Stays on their filesystem (no descent into a
// mount point below) and never follows links.
inline void HandTreeTo(const std::string& dir, int uid, int gid, dev_t dev, int depth) {
  struct stat st;
  if (depth > 8 || lstat(dir.c_str(), &st) != 0 || st.st_dev != dev) return;
  lchown(dir.c_str(), uid, gid);
  if (!S_ISDIR(st.st_mode)) return;
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  if (DIR* d = fdopendir(fd)) {
    while (struct dirent* ent = readdir(d)) {
      if (std::strcmp(ent->d_name, ".") != 0 && std::strcmp(ent->d_name, "..") != 0) {
        HandTreeTo(dir + "/" + ent->d_name, uid, gid, dev, depth + 1);
      }
    }
    closedir(d);
  } else {
    close(fd);
  }
}

// mount_setattr(2) on `path` (AT_RECURSIVE when `recursive`); -1 + errno on failure.
inline int SetMountAttr(const char* path, bool recursive, unsigned long long set, unsigned long long clr) {
  struct mount_attr attr = {};
  attr.attr_set = set;
  attr.attr_clr = clr;
  return static_cast<int>(syscall(SYS_mount_setattr, AT_FDCWD, path, recursive ? AT_RECURSIVE : 0, &attr,
                                  sizeof(attr)));
}

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_CONTAIN_PATH_UTIL_H_
