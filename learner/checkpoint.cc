#include "common/clock.h"
#include "learner/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

#include <ATen/Context.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/file.h"
#include "common/log.h"
#include "learner/safetensors.h"

namespace kernelrl::learner {
namespace {


// Removes all but the newest `keep` step-* directories of `dir` (never
// `spare`, the one just written). What is saved stays saved: an old one that
// will not go is a warning.
void KeepNewestSteps(const std::string& dir, int keep, const std::string& spare) {
  std::vector<std::string> steps;
  for (const std::string& n : ListDir(dir)) {
    if (absl::StartsWith(n, "step-")) steps.push_back(n);
  }
  for (size_t i = 0; keep > 0 && i + keep < steps.size(); ++i) {
    if (steps[i] == spare) continue;
    if (auto r = RemoveTree(dir + "/" + steps[i]); !r.ok()) KLOG(WARNING) << "retention: " << r;
  }
}

// Every regular file under dir (relative path -> size); fsyncs directories on the way.
absl::Status Inventory(const std::string& dir, const std::string& rel, Json* files) {
  for (const std::string& n : ListDir(dir)) {
    const std::string path = dir + "/" + n, r = rel.empty() ? n : rel + "/" + n;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return absl::InternalError(absl::StrCat("stat ", path));
    if (S_ISDIR(st.st_mode)) {
      if (auto s = Inventory(path, r, files); !s.ok()) return s;
    } else if (r != "manifest.json") {
      (*files)[r] = Json(st.st_size);
    }
  }
  return FsyncDir(dir);
}


absl::Status SaveState(const std::string& path, const CheckpointToSave& c) {
  std::vector<at::Tensor> keep;
  std::vector<TensorToWrite> tensors;
  auto add = [&](const std::string& name, const at::Tensor& t) -> absl::Status {
    at::Tensor cpu = t.detach().to(at::kCPU).contiguous();
    DType dt;
    switch (cpu.scalar_type()) {
      case at::kFloat: dt = DType::kF32; break;
      case at::kBFloat16: dt = DType::kBF16; break;
      case at::kHalf: dt = DType::kF16; break;
      case at::kDouble: dt = DType::kF64; break;
      case at::kLong: dt = DType::kI64; break;
      case at::kInt: dt = DType::kI32; break;
      case at::kByte: dt = DType::kU8; break;
      default: return absl::InvalidArgumentError(absl::StrCat("cannot checkpoint dtype of ", name));
    }
    keep.push_back(cpu);
    tensors.push_back({name, dt, cpu.sizes().vec(), cpu.data_ptr(), static_cast<size_t>(cpu.nbytes())});
    return absl::OkStatus();
  };
  for (const auto& [name, t] : c.optimizer) {
    if (auto s = add("optimizer/" + name, t); !s.ok()) return s;
  }
  if (c.save_rng) {
    if (auto s = add("rng/cpu", at::detail::getDefaultCPUGenerator().get_state()); !s.ok()) return s;
    if (at::hasCUDA()) {
      for (int i = 0; i < static_cast<int>(at::getNumGPUs()); ++i) {
        auto gen = at::globalContext().defaultGenerator(c10::Device(at::kCUDA, i));
        if (auto s = add(absl::StrCat("rng/cuda:", i), gen.get_state()); !s.ok()) return s;
      }
    }
  }
  return WriteSafetensors(path, tensors, {{"format", "kernelrl-state"}});
}

}  // namespace

absl::StatusOr<std::string> SaveCheckpoint(const std::string& root, const CheckpointToSave& c) {
  if (c.policy == nullptr) return absl::InvalidArgumentError("checkpoint needs a policy model");
  if (auto s = MakeDir(root, 0755); !s.ok()) return s;
  const std::string name = absl::StrFormat("step-%08d", c.step);
  const std::string final_dir = root + "/" + name;
  const std::string tmp = absl::StrCat(root, "/.tmp-", name, "-", ::getpid());
  // Leftovers of crashed saves.
  for (const std::string& n : ListDir(root)) {
    const bool staged_shards = absl::StartsWith(n, ".shards-") && root + "/" + n != c.shards_dir;
    if (!absl::StartsWith(n, ".tmp-") && !staged_shards) continue;
    if (auto s = RemoveTree(root + "/" + n); !s.ok()) return s;
  }
  if (auto s = MakeDir(tmp, 0755); !s.ok()) return s;
  absl::Status s = MakeDir(tmp + "/policy", 0755);
  if (s.ok()) s = c.policy->Save(tmp + "/policy");
  if (s.ok() && c.critic != nullptr) s = MakeDir(tmp + "/critic", 0755);
  if (s.ok() && c.critic != nullptr) s = c.critic->Save(tmp + "/critic");
  try {
    if (s.ok()) s = SaveState(tmp + "/state.safetensors", c);
  } catch (const std::exception& e) {
    s = absl::InternalError(absl::StrCat("saving optimizer/RNG state: ", e.what()));
  }
  if (s.ok() && !c.shards_dir.empty() && ::rename(c.shards_dir.c_str(), (tmp + "/shards").c_str()) != 0) {
    s = absl::InternalError(absl::StrCat("rename ", c.shards_dir, " -> ", tmp, "/shards: ", std::strerror(errno)));
  }
  Json files = Json::object();
  if (s.ok()) s = Inventory(tmp, "", &files);
  if (s.ok()) {
    Json m = Json::object();
    m["format_version"] = Json(1);
    m["policy_version"] = Json(c.policy_version);
    m["step"] = Json(c.step);
    m["created_at"] = Json(NowRfc3339());
    m["has_critic"] = Json(c.critic != nullptr);
    m["files"] = std::move(files);
    s = WriteFileAtomically(tmp + "/manifest.json", DumpJson(m, 2));
  }
  if (s.ok()) s = RemoveTree(final_dir);  // A re-save of the same step replaces it.
  if (s.ok()) {
    if (::rename(tmp.c_str(), final_dir.c_str()) != 0) {
      s = absl::InternalError(absl::StrCat("rename ", tmp, " -> ", final_dir, ": ", std::strerror(errno)));
    }
  }
  if (s.ok()) s = FsyncDir(root);
  if (s.ok()) s = WriteFileAtomically(root + "/LATEST", name + "\n");
  if (!s.ok()) {
    if (auto r = RemoveTree(tmp); !r.ok()) KLOG(WARNING) << "checkpoint: leaving " << tmp << ": " << r;
    return s;
  }
  KeepNewestSteps(root, c.keep_last, name);
  return final_dir;
}

absl::StatusOr<std::string> SavePolicyExport(const std::string& root, int64_t step, const Transformer& policy) {
  const std::string exports = root + "/exports", name = absl::StrFormat("step-%08d", step);
  const std::string dir = exports + "/" + name, tmp = exports + "/.tmp-" + name;
  for (const std::string& d : {root, exports}) {
    if (auto s = MakeDir(d, 0755); !s.ok()) return s;
  }
  if (auto s = RemoveTree(tmp); !s.ok()) return s;
  if (auto s = MakeDir(tmp, 0755); !s.ok()) return s;
  if (auto s = policy.SaveMerged(tmp); !s.ok()) return s;  // Plain weights: any engine loads them.
  if (auto s = RemoveTree(dir); !s.ok()) return s;  // A re-run of a rolled-back step.
  if (::rename(tmp.c_str(), dir.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("rename ", tmp, " -> ", dir, ": ", std::strerror(errno)));
  }
  KeepNewestSteps(exports, 2, name);  // The one just published and the one before it.
  return dir;
}

void DropPolicyExports(const std::string& root, int64_t step) {
  const std::string exports = root + "/exports";
  for (const std::string& n : ListDir(exports)) {
    int64_t k = 0;
    if (absl::StartsWith(n, ".tmp-") || (absl::SimpleAtoi(absl::string_view(n).substr(5), &k) && k <= step)) {
      if (auto s = RemoveTree(exports + "/" + n); !s.ok()) KLOG(WARNING) << "exports: " << s;
    }
  }
}

absl::StatusOr<LoadedCheckpoint> LoadLatestCheckpoint(const std::string& root, bool restore_rng) {
  auto latest = ReadFileToString(root + "/LATEST");
  if (!latest.ok()) return latest.status();
  std::string name(absl::StripAsciiWhitespace(*latest));
  if (name.empty() || name.find('/') != std::string::npos) {
    return absl::DataLossError(absl::StrCat(root, "/LATEST is malformed: \"", name, "\""));
  }
  return LoadCheckpoint(root + "/" + name, restore_rng);
}

absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& dir, bool restore_rng) {
  LoadedCheckpoint out;
  out.dir = dir;
  auto text = ReadFileToString(dir + "/manifest.json");
  if (!text.ok()) return text.status();
  auto m = ParseJson(*text);
  if (!m.ok()) return absl::DataLossError(absl::StrCat(dir, "/manifest.json: ", m.status().message()));
  out.manifest = *m;
  auto version = GetJsonInt(*m, "policy_version", -1);
  auto step = GetJsonInt(*m, "step", -1);
  const Json* files = FindJson(*m, "files");
  if (!version.ok() || *version < 0 || !step.ok() || *step < 0 || files == nullptr || !files->is_object()) {
    return absl::DataLossError(absl::StrCat(dir, "/manifest.json lacks policy_version, step or files"));
  }
  out.policy_version = *version;
  out.step = *step;
  for (const auto& [rel, size] : files->items()) {
    struct stat st;
    const std::string path = dir + "/" + rel;
    if (::stat(path.c_str(), &st) != 0) return absl::DataLossError(absl::StrCat("checkpoint file missing: ", path));
    if (st.st_size != JsonInt(size).value_or(-1)) {
      return absl::DataLossError(absl::StrCat("checkpoint file ", path, " is ", st.st_size, " bytes, manifest says ",
                                              DumpJson(size)));
    }
  }
  out.policy_dir = dir + "/policy";
  if (GetJsonBool(*m, "has_critic", false).value_or(false)) out.critic_dir = dir + "/critic";
  auto state = SafetensorsFile::Open(dir + "/state.safetensors");
  if (!state.ok()) return state.status();
  try {
    for (const TensorView& v : (*state)->tensors()) {
      at::ScalarType type;
      switch (v.dtype) {
        case DType::kF32: type = at::kFloat; break;
        case DType::kBF16: type = at::kBFloat16; break;
        case DType::kF16: type = at::kHalf; break;
        case DType::kF64: type = at::kDouble; break;
        case DType::kI64: type = at::kLong; break;
        case DType::kI32: type = at::kInt; break;
        case DType::kU8: type = at::kByte; break;
        default: return absl::DataLossError(absl::StrCat("unexpected dtype of ", v.name));
      }
      at::Tensor t = at::from_blob(const_cast<uint8_t*>(v.data), v.shape, at::TensorOptions().dtype(type)).clone();
      if (absl::StartsWith(v.name, "optimizer/")) {
        out.optimizer[v.name.substr(10)] = t;
      } else if (restore_rng && v.name == "rng/cpu") {
        at::Generator gen = at::detail::getDefaultCPUGenerator();
        gen.set_state(t);
      } else if (restore_rng && absl::StartsWith(v.name, "rng/cuda:") && at::hasCUDA()) {
        const int i = std::atoi(v.name.c_str() + 9);
        if (i < static_cast<int>(at::getNumGPUs())) {
          at::Generator gen = at::globalContext().defaultGenerator(c10::Device(at::kCUDA, i));
          gen.set_state(t);
        }
      }
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(dir, "/state.safetensors: ", e.what()));
  }
  return out;
}

}  // namespace kernelrl::learner
