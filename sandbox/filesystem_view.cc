#include "sandbox/filesystem_view.h"

#include <glob.h>
#include <sys/stat.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/log.h"
#include "sandbox/contain/view_defaults.h"

namespace kernelrl::sandbox {
namespace {

bool IsPattern(const std::string& p) { return p.find_first_of("*?[") != std::string::npos; }

bool ExistsOnHost(const std::string& p) {
  if (!IsPattern(p)) {
    struct stat st;
    return lstat(p.c_str(), &st) == 0;
  }
  glob_t g;
  const bool any = glob(p.c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0;
  globfree(&g);
  return any;
}

// `configured` or, when empty, `defaults`; each path checked.
absl::Status Resolve(const std::string& field, const google::protobuf::RepeatedPtrField<std::string>& configured,
                     const std::vector<std::string>& defaults, std::vector<std::string>* out,
                     std::vector<std::string>* warnings) {
  const std::string name = "SandboxConfig.view." + field;
  if (configured.empty()) {
    *out = defaults;
  } else {
    out->assign(configured.begin(), configured.end());
  }
  for (const std::string& p : *out) {
    std::string why;
    if (p.empty() || p[0] != '/') {
      why = "is not an absolute path";
    } else if (p == "/" || absl::StrContains(p, "//")) {
      why = "is the host's whole root or not canonical";
    } else if (absl::StrContains(p, ":")) {
      why = "contains ':' (the lists travel ':'-joined)";
    } else {
      for (absl::string_view part : absl::StrSplit(p, '/')) {
        if (part == "..") why = "has a '..' component";
      }
    }
    if (!why.empty()) return absl::InvalidArgumentError(absl::StrCat(name, ": '", p, "' ", why));
    if (!ExistsOnHost(p)) {
      warnings->push_back(absl::StrCat(name, ": ", p, IsPattern(p) ? " matches nothing" : " does not exist",
                                       " on this host (left out of the view)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ResolvedView> ResolveFilesystemView(const SandboxConfig& config) {
  ResolvedView v;
  const v1::FilesystemView& c = config.view();
  if (absl::Status s = Resolve("extra_ro_paths", c.extra_ro_paths(), {}, &v.extra_ro, &v.warnings); !s.ok()) return s;
  if (config.backend() == "cpu") return v;
  if (absl::Status s = Resolve("gpu_dev_paths", c.gpu_dev_paths(), DefaultGpuDevPaths(), &v.gpu_dev, &v.warnings);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Resolve("gpu_ro_paths", c.gpu_ro_paths(), DefaultGpuRoPaths(), &v.gpu_ro, &v.warnings);
      !s.ok()) {
    return s;
  }
  return v;
}

absl::StatusOr<std::vector<std::string>> ZygoteViewArgs(const SandboxConfig& config) {
  absl::StatusOr<ResolvedView> v = ResolveFilesystemView(config);
  if (!v.ok()) return v.status();
  for (const std::string& w : v->warnings) KLOG(WARNING) << "sandbox: " << w;
  return std::vector<std::string>{"--view-extra-ro", absl::StrJoin(v->extra_ro, ":"),
                                  "--view-gpu-dev",  absl::StrJoin(v->gpu_dev, ":"),
                                  "--view-gpu-ro",   absl::StrJoin(v->gpu_ro, ":")};
}

}  // namespace kernelrl::sandbox
