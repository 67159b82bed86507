#include "profiler_service/baseline_cache.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "google/protobuf/text_format.h"

namespace kernelrl {
namespace {

std::string Sanitize(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    out.push_back(ok ? c : '_');
  }
  if (out.empty() || out == "." || out == "..") out = "_" + out;
  return out;
}

}  // namespace

BaselineKey BaselineCache::KeyOf(const Baseline& b) {
  return {b.task_hash(), b.gpu_model(), b.torch_version(), b.input_policy_hash()};
}

std::string BaselineCache::PathFor(const BaselineKey& k) const {
  return absl::StrCat(root_, "/", Sanitize(k.gpu_model), "/", Sanitize(k.torch_version), "/",
                      Sanitize(k.task_hash), "_", Sanitize(k.input_policy_hash), ".textproto");
}

absl::StatusOr<Baseline> BaselineCache::Get(const BaselineKey& key) const {
  const std::string path = PathFor(key);
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::IsNotFound(text.status()) ? absl::NotFoundError(absl::StrCat("no baseline at ", path))
                                           : text.status();
  }
  Baseline b;
  if (!google::protobuf::TextFormat::ParseFromString(*text, &b)) {
    return absl::DataLossError(absl::StrCat("baseline file does not parse: ", path));
  }
  return b;
}

absl::Status BaselineCache::Put(const Baseline& b) const {
  const BaselineKey key = KeyOf(b);
  if (key.task_hash.empty() || key.gpu_model.empty()) {
    return absl::InvalidArgumentError("baseline without task_hash or gpu_model");
  }
  const std::filesystem::path path = PathFor(key);
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) return absl::InternalError(absl::StrCat("mkdir ", path.parent_path().string(), ": ", ec.message()));
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(b, &text)) {
    return absl::InternalError("baseline does not serialise");
  }
  const std::string tmp = absl::StrCat(path.string(), ".tmp.", getpid(), ".", gettid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat("write ", tmp, ": ", std::strerror(errno)));
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("rename to ", path.string(), ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace kernelrl
