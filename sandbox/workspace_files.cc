#include "sandbox/workspace_files.h"

#include <dirent.h>
#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "profiler_service/task_key.h"

namespace kernelrl::sandbox {
namespace {

absl::Status Walk(const std::string& root, const std::string& rel, Workspace& ws) {
  const std::string dir = rel.empty() ? root : root + "/" + rel;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return absl::NotFoundError("cannot open " + dir);
  absl::Status status;
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string child_rel = rel.empty() ? name : rel + "/" + name;
    struct stat st;
    if (lstat((root + "/" + child_rel).c_str(), &st) != 0) continue;
    // Local files are the caller's own (CLI, Bazel runfiles link every
    // file): a link to a file is read through; a linked directory is refused.
    if (S_ISLNK(st.st_mode)) {
      if (stat((root + "/" + child_rel).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
        status = absl::InvalidArgumentError("symlink to a non-file in workspace: " + child_rel);
        break;
      }
    }
    if (S_ISDIR(st.st_mode)) {
      status = Walk(root, child_rel, ws);
      if (!status.ok()) break;
    } else if (S_ISREG(st.st_mode)) {
      absl::StatusOr<std::string> content = ReadFileToString(root + "/" + child_rel);
      if (!content.ok()) {
        status = content.status();
        break;
      }
      WorkspaceFile* f = ws.add_files();
      f->set_path(child_rel);
      f->set_content(*content);
    }
  }
  closedir(d);
  return status;
}

}  // namespace

absl::StatusOr<Workspace> ReadWorkspaceDir(const std::string& dir) {
  Workspace ws;
  if (absl::Status s = Walk(dir, "", ws); !s.ok()) return s;
  return ws;
}

absl::StatusOr<Task> ReadTaskFile(const std::string& path, const std::string& id) {
  absl::StatusOr<std::string> src = ReadFileToString(path);
  if (!src.ok()) return src.status();
  Task t;
  t.set_id(id);
  t.set_reference_source(*src);
  // The baseline cache key (profiler_service/task_key.h), declared device "cuda".
  t.set_content_hash(ContentHashOf(t));
  return t;
}

}  // namespace kernelrl::sandbox
