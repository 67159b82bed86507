#include "actor/workspace.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file.h"
#include "common/log.h"

namespace kernelrl::actor {
namespace {

std::string RandomHex() {
  std::random_device rd;
  std::string s;
  for (int i = 0; i < 4; ++i) absl::StrAppend(&s, absl::Hex(rd(), absl::kZeroPad8));
  return s;
}

bool IsSnapshotFile(const std::string& rel) {
  if (rel == "model.py" || rel == "SKILL.md") return false;
  if (rel == "model_new.py" || absl::StartsWith(rel, "kernels/")) return true;
  if (rel.find('/') != std::string::npos) return false;
  for (const char* ext : {".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp"}) {
    if (absl::EndsWith(rel, ext)) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RolloutWorkspace>> RolloutWorkspace::Create(const std::string& root,
                                                                           const std::string& reference_source,
                                                                           const std::string& skill_text) {
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return absl::InternalError(absl::StrCat("create ", root, ": ", ec.message()));
  // Others may not list the root (rollout names are not guessable).
  ::chmod(root.c_str(), 0711);
  const std::string top = std::filesystem::absolute(root).string() + "/" + RandomHex();
  const std::string ws = top + "/ws", ctl = top + "/ctl";
  for (const std::string& d : {top, ws, ctl}) {
    if (::mkdir(d.c_str(), 0700) != 0) {
      return absl::InternalError(absl::StrCat("mkdir ", d, ": ", std::strerror(errno)));
    }
  }
  int fd = ::open(ws.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", ws, ": ", std::strerror(errno)));
  std::unique_ptr<RolloutWorkspace> w(new RolloutWorkspace(top, ws, ctl, fd));
  if (absl::Status s = w->WriteFile("model.py", reference_source, 1 << 24); !s.ok()) return s;
  if (!skill_text.empty()) {
    if (absl::Status s = w->WriteFile("SKILL.md", skill_text, 1 << 24); !s.ok()) return s;
  }
  return w;
}

RolloutWorkspace::RolloutWorkspace(std::string top, std::string ws, std::string ctl, int ws_fd)
    : top_(std::move(top)), ws_(std::move(ws)), ctl_(std::move(ctl)), ws_fd_(ws_fd) {}

RolloutWorkspace::~RolloutWorkspace() {
  ::close(ws_fd_);
  // common/file's RemoveTree (openat/unlinkat, no symlink followed), not
  // std::filesystem::remove_all: libtorch.so exports an unversioned copy of
  // that symbol, and a binary linking both bound to it and crashed here.
  if (absl::Status s = RemoveTree(top_); !s.ok()) {
    KLOG(WARNING) << "actor: workspace not removed: " << s;
  }
}

absl::StatusOr<std::string> RolloutWorkspace::Normalize(const std::string& path) const {
  if (path.empty()) return absl::InvalidArgumentError("empty path");
  if (path[0] == '/') {
    // Accept the workspace's own absolute path, nothing else.
    if (absl::StartsWith(path, ws_ + "/")) return Normalize(path.substr(ws_.size() + 1));
    return absl::InvalidArgumentError(
        absl::StrCat("path \"", path, "\" is absolute; use a path relative to the workspace root"));
  }
  std::vector<std::string> parts;
  for (absl::string_view p : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (p == ".") continue;
    if (p == "..") {
      return absl::InvalidArgumentError(absl::StrCat("path \"", path, "\" leaves the workspace (\"..\")"));
    }
    if (p.find('\0') != absl::string_view::npos) return absl::InvalidArgumentError("path contains a NUL byte");
    parts.emplace_back(p);
  }
  if (parts.empty()) return absl::InvalidArgumentError(absl::StrCat("path \"", path, "\" names the workspace root"));
  return absl::StrJoin(parts, "/");
}

int RolloutWorkspace::OpenBeneath(const std::string& rel, int flags, int mode) const {
  struct open_how how = {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = static_cast<uint64_t>(mode);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(::syscall(SYS_openat2, ws_fd_, rel.c_str(), &how, sizeof(how)));
}

absl::StatusOr<std::string> RolloutWorkspace::ReadFile(const std::string& path, int64_t max_bytes) const {
  absl::StatusOr<std::string> rel = Normalize(path);
  if (!rel.ok()) return rel.status();
  int fd = OpenBeneath(*rel, O_RDONLY);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("file not found: ", *rel));
    if (errno == EXDEV) return absl::InvalidArgumentError(absl::StrCat(*rel, " leads outside the workspace"));
    return absl::InvalidArgumentError(absl::StrCat("cannot open ", *rel, ": ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(*rel, " is not a regular file"));
  }
  if (st.st_size > max_bytes) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(*rel, " has ", st.st_size, " bytes; the limit is ", max_bytes));
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

bool RolloutWorkspace::Exists(const std::string& path) const {
  absl::StatusOr<std::string> rel = Normalize(path);
  if (!rel.ok()) return false;
  int fd = OpenBeneath(*rel, O_PATH);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

absl::Status RolloutWorkspace::WriteFile(const std::string& path, const std::string& content, int64_t max_bytes) {
  absl::StatusOr<std::string> rel = Normalize(path);
  if (!rel.ok()) return rel.status();
  if (static_cast<int64_t>(content.size()) > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("content has ", content.size(), " bytes; the limit is ", max_bytes));
  }
  // Parent directories, one component at a time beneath ws.
  std::vector<std::string> parts = absl::StrSplit(*rel, '/');
  std::string prefix;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    prefix = prefix.empty() ? parts[i] : prefix + "/" + parts[i];
    int d = OpenBeneath(prefix, O_PATH | O_DIRECTORY);
    if (d >= 0) {
      ::close(d);
      continue;
    }
    if (errno == EXDEV) return absl::InvalidArgumentError(absl::StrCat(prefix, " leads outside the workspace"));
    if (errno == ENOTDIR) return absl::InvalidArgumentError(absl::StrCat(prefix, " is a file, not a directory"));
    if (::mkdirat(ws_fd_, prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::InvalidArgumentError(absl::StrCat("cannot create directory ", prefix, ": ", std::strerror(errno)));
    }
  }
  const std::string tmp = absl::StrCat(*rel, ".kr-tmp-", ::getpid());
  int fd = OpenBeneath(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    if (errno == EXDEV) return absl::InvalidArgumentError(absl::StrCat(*rel, " leads outside the workspace"));
    return absl::InvalidArgumentError(absl::StrCat("cannot write ", *rel, ": ", std::strerror(errno)));
  }
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlinkat(ws_fd_, tmp.c_str(), 0);
      return absl::ResourceExhaustedError(absl::StrCat("write ", *rel, ": ", std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  // renameat replaces a symlink at the destination itself, never its target.
  if (::renameat(ws_fd_, tmp.c_str(), ws_fd_, rel->c_str()) != 0) {
    const int err = errno;
    ::unlinkat(ws_fd_, tmp.c_str(), 0);
    return absl::InvalidArgumentError(absl::StrCat("cannot write ", *rel, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

std::vector<std::string> RolloutWorkspace::ListFiles() const {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(ws_, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_symlink(ec)) continue;
    if (it->is_regular_file(ec)) out.push_back(it->path().lexically_relative(ws_).string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

v1::Workspace RolloutWorkspace::Snapshot() const {
  v1::Workspace w;
  for (const std::string& rel : ListFiles()) {
    if (!IsSnapshotFile(rel)) continue;
    absl::StatusOr<std::string> content = ReadFile(rel, int64_t{1} << 24);
    if (!content.ok()) continue;
    v1::WorkspaceFile* f = w.add_files();
    f->set_path(rel);
    f->set_content(*content);
  }
  return w;
}

}  // namespace kernelrl::actor
