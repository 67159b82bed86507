// The c10d group of this process alone (world size 1): every collective is
// the identity. What a whole model is sharded over when one process must lay
// it out as FSDP units (ShardedWeights::Shard) without a group to share it
// with: the weight sync's sender of an unsharded policy
// (learner/sync/collective_weight_sync.h, SendModel). Any device, no store.
#ifndef KERNELRL_LEARNER_DIST_SELF_BACKEND_H_
#define KERNELRL_LEARNER_DIST_SELF_BACKEND_H_

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <string>
#include <vector>

namespace kernelrl::learner::dist {

class SelfBackend : public c10d::Backend {
 public:
  SelfBackend() : c10d::Backend(/*rank=*/0, /*size=*/1) {}

  const std::string getBackendName() const override { return "self"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& /*tensors*/,
                                           const c10d::AllreduceOptions& /*opts*/) override {
    return Done();
  }
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& /*tensors*/,
                                           const c10d::BroadcastOptions& /*opts*/) override {
    return Done();
  }
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& /*opts*/) override {
    TORCH_CHECK(output.numel() == input.numel(), "allgather over one rank: output and input differ in size");
    if (!output.is_same(input)) output.view(input.sizes()).copy_(input);
    return Done();
  }
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& /*opts*/) override {
    TORCH_CHECK(output.numel() == input.numel(), "reduce-scatter over one rank: output and input differ in size");
    if (!output.is_same(input)) output.copy_(input.view(output.sizes()));
    return Done();
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& /*opts*/) override { return Done(); }

 private:
  class DoneWork : public c10d::Work {
   public:
    DoneWork() { finish(); }
  };
  static c10::intrusive_ptr<c10d::Work> Done() { return c10::make_intrusive<DoneWork>(); }
};

}  // namespace kernelrl::learner::dist

#endif  // KERNELRL_LEARNER_DIST_SELF_BACKEND_H_
