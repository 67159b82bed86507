#include "learner/sync/collective_weight_sync.h"

#include <ATen/ATen.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "learner/dist/self_backend.h"
#include "learner/policy/engine.h"

namespace kernelrl::learner {
namespace {

constexpr int kRoot = 0;

void Broadcast(c10d::Backend& sync, at::Tensor& t) {
  std::vector<at::Tensor> v{t};
  c10d::BroadcastOptions o;
  o.rootRank = kRoot;
  sync.broadcast(v, o)->wait();
}

}  // namespace

absl::Status SendWeights(dist::ShardedWeights& weights, c10d::Backend* sync, int64_t policy_version,
                         std::optional<at::Device> wire) {
  at::NoGradGuard no_grad;
  try {
    weights.FinishGradients();  // Prefetched gathers hold the weights before the last step.
    const at::Device device = wire.value_or(weights.parameters().front().device());
    const int64_t units = weights.unit_count();
    at::ScalarType dtype = at::kFloat;
    for (int64_t u = 0; u < units; ++u) {
      const dist::ShardedWeights::Full full = weights.Gather(u);  // Collective over the shard group.
      weights.Prefetch(u + 1);                                    // Gathered while this unit is sent.
      if (sync == nullptr) continue;
      if (u == 0) {  // The header goes first; the dtype is the gathered buffers'.
        dtype = full.train.scalar_type();
        const std::string layout = DumpJson(weights.Layout());
        at::Tensor header =
            at::tensor({policy_version, static_cast<int64_t>(layout.size()), static_cast<int64_t>(dtype)}, at::kLong)
                .to(device);
        Broadcast(*sync, header);
        at::Tensor bytes = at::empty({static_cast<int64_t>(layout.size())}, at::kByte);
        std::memcpy(bytes.data_ptr(), layout.data(), layout.size());
        bytes = bytes.to(device);
        Broadcast(*sync, bytes);
      }
      at::Tensor part = full.train.narrow(0, 0, weights.unit_numel(u)).to(device).contiguous();
      if (part.numel() > 0) Broadcast(*sync, part);
      if (weights.unit_frozen_numel(u) > 0) {
        at::Tensor frozen = full.frozen.narrow(0, 0, weights.unit_frozen_numel(u)).to(device).contiguous();
        Broadcast(*sync, frozen);
      }
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("weight sync (send) of version ", policy_version, ": ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status SendModel(const Transformer& policy, c10d::Backend& sync, int64_t policy_version, at::Device wire,
                       at::ScalarType dtype) {
  at::NoGradGuard no_grad;
  ModelOptions cpu;  // fp32 masters on the CPU: exact, and off the wire device.
  auto copy = policy.MergedCopy(cpu);
  if (!copy.ok()) return copy.status();
  auto units = dist::ShardedWeights::Shard(**copy, c10::make_intrusive<dist::SelfBackend>(), at::kCPU, dtype);
  if (!units.ok()) return units.status();
  return SendWeights(**units, &sync, policy_version, wire);
}

absl::StatusOr<ReceivedWeights> ReceiveWeights(c10d::Backend& sync, const ModelOptions& options) {
  at::NoGradGuard no_grad;
  try {
    const at::Device device = options.device;
    at::Tensor header = at::empty({3}, at::TensorOptions().dtype(at::kLong).device(device));
    Broadcast(sync, header);
    header = header.to(at::kCPU);
    const int64_t version = header[0].item<int64_t>(), length = header[1].item<int64_t>();
    const auto dtype = static_cast<at::ScalarType>(header[2].item<int64_t>());
    at::Tensor bytes = at::empty({length}, at::TensorOptions().dtype(at::kByte).device(device));
    Broadcast(sync, bytes);
    bytes = bytes.to(at::kCPU);
    auto layout = ParseJson(std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(length)));
    const Json* unit_list = layout.ok() ? FindJson(*layout, "units") : nullptr;
    if (unit_list == nullptr || !unit_list->is_array()) {
      return absl::DataLossError("weight sync: the layout is not the sender's JSON");
    }
    std::vector<at::Tensor> units, frozen;
    for (const Json& u : *unit_list) {
      const Json* n = FindJson(u, "numel");
      absl::StatusOr<int64_t> numel = n != nullptr ? JsonInt(*n) : absl::StatusOr<int64_t>(absl::DataLossError("numel"));
      if (!numel.ok()) return absl::DataLossError("weight sync: a unit of the layout has no numel");
      auto frozen_numel = GetJsonInt(u, "frozen_numel", 0);
      if (!frozen_numel.ok()) return frozen_numel.status();
      units.push_back(at::empty({*numel}, at::TensorOptions().dtype(dtype).device(device)));
      if (*numel > 0) Broadcast(sync, units.back());
      frozen.push_back(at::empty({*frozen_numel}, at::TensorOptions().dtype(dtype).device(device)));
      if (*frozen_numel > 0) Broadcast(sync, frozen.back());
    }
    auto model = dist::ShardedWeights::Assemble(*layout, units, frozen, options);
    if (!model.ok()) return model.status();
    (*model)->MergeAdapters();  // An engine serves the merged weights.
    return ReceivedWeights{std::move(*model), version};
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("weight sync (receive): ", e.what()));
  }
}

absl::StatusOr<int64_t> ReceiveIntoEngine(c10d::Backend& sync, const ModelOptions& options, PolicyEngine* engine) {
  auto got = ReceiveWeights(sync, options);
  if (!got.ok()) return got.status();
  const int64_t version = got->policy_version;
  engine->SwapWeights(std::move(got->model), version, absl::StrCat("c10d:version-", version));
  return version;
}

}  // namespace kernelrl::learner
