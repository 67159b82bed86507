#include "learner/dist/sharded_checkpoint.h"

#include <cstdio>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "learner/safetensors.h"

namespace kernelrl::learner::dist {
namespace {

std::string RankFile(const std::string& dir, const std::string& name, int rank, int world) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), ".rank-%05d-of-%05d.safetensors", rank, world);
  return absl::StrCat(dir, "/", name, buf);
}

std::string LayoutFile(const std::string& dir, const std::string& name) {
  return absl::StrCat(dir, "/", name, ".layout.json");
}

absl::StatusOr<Json> ReadLayout(const std::string& dir, const std::string& name) {
  auto text = ReadFileToString(LayoutFile(dir, name));
  if (!text.ok()) return text.status();
  return ParseJson(*text);
}

// name -> fp32 CPU tensor of one rank's file.
absl::StatusOr<std::map<std::string, at::Tensor>> ReadRankFile(const std::string& path) {
  auto file = SafetensorsFile::Open(path);
  if (!file.ok()) return file.status();
  std::map<std::string, at::Tensor> out;
  for (const TensorView& v : (*file)->tensors()) {
    if (v.dtype != DType::kF32) return absl::DataLossError(absl::StrCat(path, ": ", v.name, " is not F32"));
    at::Tensor t = at::empty(v.shape, at::kFloat);
    if (static_cast<size_t>(t.nbytes()) != v.nbytes) return absl::DataLossError(absl::StrCat(path, ": ", v.name));
    std::memcpy(t.data_ptr(), v.data, v.nbytes);
    out[v.name] = t;
  }
  return out;
}

}  // namespace

absl::Status SaveShards(const std::string& dir, const std::vector<ShardedModelRef>& models) {
  for (const ShardedModelRef& m : models) {
    const ShardedWeights& w = *m.weights;
    if (w.replica() != 0) continue;  // Replicas hold the same shards: the first writes them.
    if (w.rank() == 0) {
      if (auto s = WriteFileAtomically(LayoutFile(dir, m.name), DumpJson(w.Layout(), 2)); !s.ok()) return s;
    }
    std::map<std::string, at::Tensor> tensors = m.optimizer->State("");  // "<u>/exp_avg", ... (CPU)
    const std::vector<at::Tensor> shards = w.parameters();
    for (size_t u = 0; u < shards.size(); ++u) tensors[absl::StrCat(u, "/master")] = shards[u].detach().to(at::kCPU);
    // The frozen base of a model with adapters (fp32 holds its bf16 exactly).
    const std::vector<at::Tensor>& frozen = w.frozen_shards();
    for (size_t u = 0; u < frozen.size(); ++u) {
      if (frozen[u].numel() > 0) tensors[absl::StrCat(u, "/frozen")] = frozen[u].detach().to(at::kCPU);
    }
    std::vector<at::Tensor> keep;
    std::vector<TensorToWrite> out;
    for (const auto& [name, t] : tensors) {
      at::Tensor c = t.to(at::kFloat).contiguous();
      keep.push_back(c);
      out.push_back({name, DType::kF32, c.sizes().vec(), c.data_ptr(), static_cast<size_t>(c.nbytes())});
    }
    if (auto s = WriteSafetensors(RankFile(dir, m.name, w.rank(), w.world_size()), out); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status LoadShards(const std::string& dir, const std::vector<ShardedModelRef>& models) {
  at::NoGradGuard no_grad;
  for (const ShardedModelRef& m : models) {
    ShardedWeights& w = *m.weights;
    auto layout = ReadLayout(dir, m.name);
    if (!layout.ok()) return layout.status();
    auto world = GetJsonInt(*layout, "world_size", 0);
    if (!world.ok()) return world.status();
    if (*world != w.world_size()) {
      return absl::FailedPreconditionError(absl::StrCat(dir, ": ", m.name, " was saved by ", *world,
                                                        " ranks; this run has ", w.world_size()));
    }
    const Json* units = FindJson(*layout, "units");
    if (units == nullptr || DumpJson(*units) != DumpJson(*FindJson(w.Layout(), "units"))) {
      return absl::FailedPreconditionError(absl::StrCat(dir, ": ", m.name, " has another model shape"));
    }
    auto tensors = ReadRankFile(RankFile(dir, m.name, w.rank(), w.world_size()));
    if (!tensors.ok()) return tensors.status();
    std::vector<at::Tensor> shards = w.parameters();
    for (size_t u = 0; u < shards.size(); ++u) {
      auto it = tensors->find(absl::StrCat(u, "/master"));
      if (it == tensors->end() || it->second.numel() != shards[u].numel()) {
        return absl::DataLossError(absl::StrCat(dir, ": ", m.name, " lacks the shard of unit ", u));
      }
      shards[u].detach().copy_(it->second);
    }
    std::vector<at::Tensor>& frozen = w.mutable_frozen_shards();
    for (size_t u = 0; u < frozen.size(); ++u) {
      if (frozen[u].numel() == 0) continue;
      auto it = tensors->find(absl::StrCat(u, "/frozen"));
      if (it == tensors->end() || it->second.numel() != frozen[u].numel()) {
        return absl::DataLossError(absl::StrCat(dir, ": ", m.name, " lacks the frozen shard of unit ", u));
      }
      frozen[u].copy_(it->second);
    }
    if (auto s = m.optimizer->LoadState(*tensors, ""); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Transformer>> ConsolidateShards(const std::string& dir, const std::string& name) {
  auto layout = ReadLayout(dir, name);
  if (!layout.ok()) return layout.status();
  auto world = GetJsonInt(*layout, "world_size", 0);
  if (!world.ok()) return world.status();
  const Json* units = FindJson(*layout, "units");
  if (units == nullptr || *world <= 0) return absl::DataLossError(absl::StrCat(dir, ": bad layout for ", name));
  std::vector<std::vector<at::Tensor>> parts(units->size()), frozen_parts(units->size());
  for (int r = 0; r < *world; ++r) {
    auto tensors = ReadRankFile(RankFile(dir, name, r, static_cast<int>(*world)));
    if (!tensors.ok()) return tensors.status();
    for (size_t u = 0; u < parts.size(); ++u) {
      auto it = tensors->find(absl::StrCat(u, "/master"));
      if (it == tensors->end()) return absl::DataLossError(absl::StrCat(dir, ": rank ", r, " lacks unit ", u));
      parts[u].push_back(it->second);
      if (FindJson((*units)[u], "frozen") == nullptr) continue;
      it = tensors->find(absl::StrCat(u, "/frozen"));
      if (it == tensors->end()) return absl::DataLossError(absl::StrCat(dir, ": rank ", r, " lacks frozen unit ", u));
      frozen_parts[u].push_back(it->second);
    }
  }
  std::vector<at::Tensor> full, frozen;
  for (const auto& p : parts) full.push_back(at::cat(p));
  for (const auto& p : frozen_parts) frozen.push_back(p.empty() ? at::empty({0}) : at::cat(p));
  ModelOptions o;  // fp32 on the CPU.
  return ShardedWeights::Assemble(*layout, full, frozen, o);
}

}  // namespace kernelrl::learner::dist
