#include "sandbox/workspace.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "common/file.h"
#include "common/sha256.h"
#include "sandbox/source_scan.h"
#include "sandbox/verdict_text.h"

namespace kernelrl::sandbox {
namespace {

constexpr int kDefaultMaxFiles = 64;
constexpr int64_t kDefaultMaxFileBytes = 256 << 10;
constexpr int64_t kDefaultMaxTotalBytes = 1 << 20;
constexpr int kMaxDepth = 4;

const std::set<std::string>& AllowedExtensions() {
  static const auto* s = new std::set<std::string>{".py", ".cu", ".cuh", ".cc", ".cpp", ".cxx", ".h",
                                                   ".hpp", ".inl", ".txt", ".md", ".json"};
  return *s;
}

std::string Extension(const std::string& path) {
  size_t slash = path.rfind('/');
  size_t dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  return path.substr(dot);
}

bool IsSource(const std::string& path) {
  const std::string ext = Extension(path);
  return ext == ".cu" || ext == ".cuh" || ext == ".cc" || ext == ".cpp" || ext == ".cxx" || ext == ".h" ||
         ext == ".hpp" || ext == ".inl";
}

// Empty string when `path` is a safe relative path, else the reason.
std::string CheckPath(const std::string& path) {
  if (path.empty()) return "empty path";
  if (path.size() > 200) return "path longer than 200 characters";
  if (path[0] == '/') return "absolute path";
  for (char c : path) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '/')) {
      return "character outside [A-Za-z0-9._-/]";
    }
  }
  std::vector<std::string> parts = absl::StrSplit(path, '/');
  if (static_cast<int>(parts.size()) > kMaxDepth) return "nested deeper than 4 levels";
  for (const std::string& part : parts) {
    if (part.empty()) return "empty path component";
    if (part == "." || part == "..") return "path escapes the workspace ('.' or '..')";
    if (part[0] == '.') return "hidden file";
  }
  return "";
}

}  // namespace

bool ValidateWorkspace(const Workspace& ws, const WorkspaceLimits& limits, const std::string& backend,
                       ValidatedWorkspace* out, WorkspaceRejection* rejection) {
  auto reject = [&](Verdict::Outcome outcome, std::string reason) {
    rejection->outcome = outcome;
    rejection->reason = std::move(reason);
    return false;
  };
  const int max_files = limits.max_files() > 0 ? limits.max_files() : kDefaultMaxFiles;
  const int64_t max_file = limits.max_file_bytes() > 0 ? limits.max_file_bytes() : kDefaultMaxFileBytes;
  const int64_t max_total = limits.max_total_bytes() > 0 ? limits.max_total_bytes() : kDefaultMaxTotalBytes;
  if (ws.files_size() > max_files) {
    return reject(Verdict::BAD_WORKSPACE, absl::StrCat(ws.files_size(), " files, at most ", max_files));
  }
  std::set<std::string> seen;
  int64_t total = 0;
  bool has_model_new = false, has_binding = false, has_cu = false, has_cc = false, uses_inline = false;
  std::vector<std::pair<std::string, std::string>> for_hash;
  *out = ValidatedWorkspace();
  for (const WorkspaceFile& f : ws.files()) {
    const std::string& path = f.path();
    if (std::string why = CheckPath(path); !why.empty()) {
      return reject(Verdict::BAD_WORKSPACE, "bad path '" + path.substr(0, 80) + "': " + why);
    }
    if (!seen.insert(path).second) return reject(Verdict::BAD_WORKSPACE, "duplicate path " + path);
    if (!AllowedExtensions().count(Extension(path))) {
      return reject(Verdict::BAD_WORKSPACE, "file type not allowed: " + path);
    }
    if (static_cast<int64_t>(f.content().size()) > max_file) {
      return reject(Verdict::BAD_WORKSPACE, absl::StrCat(path, " is ", f.content().size(), " bytes, at most ", max_file));
    }
    total += f.content().size();
    if (path == "model.py") continue;  // the frozen reference comes from the Task
    if (IsSource(path)) {
      if (std::string why = ForbiddenSourceConstruct(f.content()); !why.empty()) {
        return reject(Verdict::SANDBOX_VIOLATION, path + ": " + why);
      }
      if (absl::StartsWith(path, "kernels/")) {
        const std::string ext = Extension(path);
        if (ext == ".cu") {
          has_cu = true;
          out->kernel_sources.push_back(path);
        } else if (ext == ".cc" || ext == ".cpp" || ext == ".cxx") {
          has_cc = true;
          out->kernel_sources.push_back(path);
        }
      }
      if (absl::StrContains(f.content(), "PYBIND11_MODULE") || absl::StrContains(f.content(), "TORCH_LIBRARY")) {
        has_binding = true;
      }
    }
    if (path == "model_new.py") {
      has_model_new = true;
      uses_inline = absl::StrContains(f.content(), "load_inline") || absl::StrContains(f.content(), "cpp_extension");
    }
    out->files.push_back(&f);
    for_hash.emplace_back(path, f.content());
  }
  if (total > max_total) {
    return reject(Verdict::BAD_WORKSPACE, absl::StrCat("workspace is ", total, " bytes, at most ", max_total));
  }
  if (!has_model_new) return reject(Verdict::BAD_WORKSPACE, kModelNewMissing);
  Workspace::Layout layout = ws.layout();
  if (layout == Workspace::LAYOUT_UNSPECIFIED) {
    if (backend == "cpu") {
      layout = Workspace::CPU;
    } else if (has_binding) {
      layout = Workspace::TORCH_EXTENSION;
    } else if (has_cu || !uses_inline) {
      layout = Workspace::FAST_PATH;  // possibly with no kernels at all
    } else {
      layout = Workspace::SINGLE_FILE_INLINE;
    }
  }
  if (backend == "cpu" && has_cu) {
    return reject(Verdict::BAD_WORKSPACE, "CUDA sources (kernels/*.cu) sent to the CPU backend");
  }
  if (backend == "cpu" && layout != Workspace::CPU) {
    return reject(Verdict::BAD_WORKSPACE, "the CPU backend only runs the CPU layout (kernels/*.cc)");
  }
  if (backend != "cpu" && layout == Workspace::CPU) {
    return reject(Verdict::BAD_WORKSPACE, "CPU layout sent to a CUDA worker");
  }
  if (layout == Workspace::FAST_PATH && has_cc && !has_cu) {
    return reject(Verdict::BAD_WORKSPACE, "fast path needs kernels/*.cu");
  }
  if (layout == Workspace::TORCH_EXTENSION && !has_binding) {
    return reject(Verdict::BAD_WORKSPACE, "torch-extension layout without a PYBIND11_MODULE binding file");
  }
  if (layout == Workspace::SINGLE_FILE_INLINE) {
    // The C/C++ sources load_inline compiles live in Python strings.
    for (const WorkspaceFile* f : out->files) {
      if (Extension(f->path()) != ".py") continue;
      if (std::string why = ForbiddenEmbeddedSource(f->content()); !why.empty()) {
        return reject(Verdict::SANDBOX_VIOLATION, f->path() + ": " + why);
      }
    }
  }
  std::sort(for_hash.begin(), for_hash.end());
  std::string blob = absl::StrCat("layout=", layout, "\n");
  for (const auto& [path, content] : for_hash) absl::StrAppend(&blob, path.size(), ":", path, content.size(), ":", content);
  out->content_hash = Sha256Hex(blob);
  out->layout = layout;
  std::sort(out->kernel_sources.begin(), out->kernel_sources.end());
  return true;
}

absl::Status MaterializeWorkspace(const ValidatedWorkspace& ws, const std::string& dir) {
  if (mkdir(dir.c_str(), 0700) != 0) return absl::InternalError(absl::StrCat("mkdir ", dir, ": ", std::strerror(errno)));
  for (const WorkspaceFile* f : ws.files) {
    std::string path = dir;
    std::vector<std::string> parts = absl::StrSplit(f->path(), '/');
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      path += "/" + parts[i];
      if (absl::Status s = MakeDir(path, 0700); !s.ok()) return s;
    }
    const std::string file = dir + "/" + f->path();
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(f->content().data(), f->content().size());
    out.close();  // A failed flush on close is a failed write too.
    if (!out) return absl::InternalError("write " + file);
  }
  return absl::OkStatus();
}

}  // namespace kernelrl::sandbox
