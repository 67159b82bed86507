// A c10d::Backend for CPU tests of data-parallel code: allreduce (SUM, MAX),
// broadcast, all-gather into one buffer and reduce-scatter (SUM) of tensors through the rendezvous store (each rank posts
// its tensor under a per-call key, reads everyone's, and combines them in
// rank order, so every rank gets bit-identical results). Test-only: the
// wheel's gloo backend, the real CPU one, ships without headers, and CI has no
// GPU for ProcessGroupNCCL. Slow (store round trips); tiny tensors only.
#ifndef KERNELRL_LEARNER_DIST_STORE_BACKEND_FOR_TEST_H_
#define KERNELRL_LEARNER_DIST_STORE_BACKEND_FOR_TEST_H_

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstring>
#include <string>
#include <vector>

namespace kernelrl::learner::dist {

class StoreBackendForTest : public c10d::Backend {
 public:
  StoreBackendForTest(c10::intrusive_ptr<c10d::Store> store, int rank, int size)
      : c10d::Backend(rank, size), store_(std::move(store)) {}

  const std::string getBackendName() const override { return "store_for_test"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    TORCH_CHECK(opts.reduceOp == c10d::ReduceOp::SUM || opts.reduceOp == c10d::ReduceOp::MAX, "SUM or MAX only");
    for (at::Tensor& t : tensors) {
      const std::string key = NextKey();
      Post(key, t);
      at::Tensor acc;
      for (int r = 0; r < size_; ++r) {
        at::Tensor x = Read(key, r, t);
        acc = !acc.defined() ? x : opts.reduceOp == c10d::ReduceOp::SUM ? acc + x : at::maximum(acc, x);
      }
      t.copy_(acc);
    }
    return c10::make_intrusive<DoneWork>();
  }

  // output [W * n] = every rank's input [n], in rank order.
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& /*opts*/) override {
    TORCH_CHECK(output.numel() == input.numel() * size_, "allgather: output is not world_size x input");
    const std::string key = NextKey();
    Post(key, input);
    at::Tensor flat = output.view({size_, input.numel()});
    for (int r = 0; r < size_; ++r) flat[r].copy_(Read(key, r, input).reshape({-1}));
    return c10::make_intrusive<DoneWork>();
  }

  // output [n] = slice `rank` of the sum over ranks of input [W * n].
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK(opts.reduceOp == c10d::ReduceOp::SUM, "SUM only");
    TORCH_CHECK(input.numel() == output.numel() * size_, "reduce_scatter: input is not world_size x output");
    const std::string key = NextKey();
    Post(key, input);
    at::Tensor acc;
    for (int r = 0; r < size_; ++r) {
      at::Tensor x = Read(key, r, input).reshape({size_, output.numel()})[rank_];
      acc = acc.defined() ? acc + x : x;
    }
    output.copy_(acc.view(output.sizes()));
    return c10::make_intrusive<DoneWork>();
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    for (at::Tensor& t : tensors) {
      const std::string key = NextKey();
      if (rank_ == opts.rootRank) Post(key, t);
      t.copy_(Read(key, static_cast<int>(opts.rootRank), t));
    }
    return c10::make_intrusive<DoneWork>();
  }

 private:
  class DoneWork : public c10d::Work {
   public:
    DoneWork() { finish(); }
  };

  std::string NextKey() { return "c" + std::to_string(calls_++); }
  void Post(const std::string& key, const at::Tensor& t) {
    at::Tensor c = t.to(at::kCPU).contiguous();
    const auto* p = static_cast<const uint8_t*>(c.data_ptr());
    store_->set(key + "/" + std::to_string(rank_), std::vector<uint8_t>(p, p + c.nbytes()));
  }
  at::Tensor Read(const std::string& key, int r, const at::Tensor& like) {
    std::vector<uint8_t> bytes = store_->get(key + "/" + std::to_string(r));
    at::Tensor x = at::empty(like.sizes(), like.options().device(at::kCPU));
    TORCH_CHECK(bytes.size() == x.nbytes(), "size mismatch for ", key);
    std::memcpy(x.data_ptr(), bytes.data(), bytes.size());
    return x.to(like.device());
  }

  c10::intrusive_ptr<c10d::Store> store_;
  int64_t calls_ = 0;
};

}  // namespace kernelrl::learner::dist

#endif  // KERNELRL_LEARNER_DIST_STORE_BACKEND_FOR_TEST_H_
