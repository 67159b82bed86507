#include "learner/policy/decode_graphs.h"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>

#include "common/log.h"

namespace kernelrl::learner {
namespace {

int64_t Pow2AtLeast(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace

DecodeGraphs::DecodeGraphs(const Transformer* model, PagedKVCache* cache, int64_t trash_block, int64_t max_blocks)
    : model_(model),
      cache_(cache),
      trash_block_(trash_block),
      max_blocks_(max_blocks),
      capture_(model->options().device.is_cuda()) {}

DecodeGraphs::~DecodeGraphs() = default;

int DecodeGraphs::captured() const {
  return static_cast<int>(
      std::count_if(graphs_.begin(), graphs_.end(), [](const auto& kv) { return kv.second.graph != nullptr; }));
}

std::optional<at::Tensor> DecodeGraphs::Decode(const std::vector<int64_t>& ids, const std::vector<int64_t>& positions,
                                               const std::vector<std::vector<int32_t>>& tables) {
  if (failed_) return std::nullopt;
  const int64_t n = static_cast<int64_t>(ids.size()), bs = cache_->block_size;
  int64_t need = 1;
  for (int64_t p : positions) need = std::max(need, p / bs + 1);
  const int64_t b = Pow2AtLeast(n);
  const int64_t m = std::min(Pow2AtLeast(need), std::max(max_blocks_, need));
  // Host image of the inputs; padding rows and table tails use the trash block.
  std::vector<int64_t> host(3 * b + b * m, 0);
  for (int64_t i = 0; i < b; ++i) {
    host[2 * b + i] = trash_block_ * bs;
    std::fill_n(host.begin() + 3 * b + i * m, m, trash_block_);
  }
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(positions[i] / bs < static_cast<int64_t>(tables[i].size()), "DecodeGraphs: sequence ", i,
                "'s block table does not cover position ", positions[i]);
    host[i] = ids[i];
    host[b + i] = positions[i];
    host[2 * b + i] = tables[i][positions[i] / bs] * bs + positions[i] % bs;
    const int64_t used = std::min<int64_t>(static_cast<int64_t>(tables[i].size()), m);
    for (int64_t j = 0; j < used; ++j) host[3 * b + i * m + j] = tables[i][j];
  }
  Graph& g = graphs_[{b, m}];
  const bool fresh = !g.inputs.defined();
  if (fresh) g.inputs = at::empty({3 * b + b * m}, at::TensorOptions().dtype(at::kLong).device(model_->options().device));
  g.inputs.copy_(at::tensor(host, at::kLong));
  try {
    at::Tensor hidden = Run(&g, b, m);
    return model_->HeadLogits(hidden.narrow(0, 0, n));
  } catch (const std::exception& e) {
    KLOG(WARNING) << "CUDA-graph decode off (batch " << b << ", " << m << " blocks): " << e.what()
                  << "; decoding eagerly";
    failed_ = true;
    graphs_.clear();
    return std::nullopt;
  }
}

at::Tensor DecodeGraphs::Run(Graph* g, int64_t b, int64_t m) {
  auto step = [&] {
    return model_->PagedDecodeHidden(g->inputs.narrow(0, 0, b), g->inputs.narrow(0, b, b),
                                     g->inputs.narrow(0, 2 * b, b), g->inputs.narrow(0, 3 * b, b * m).view({b, m}),
                                     cache_);
  };
  if (!capture_) return step();
  if (g->graph != nullptr) {
    g->graph->replay();
    return g->hidden;
  }
  // First use: one eager step on a side stream (warms up kernels and the
  // allocator; it is this decode step, and writing the same keys/values
  // again in the replay is harmless), then capture the same step and replay.
  // Stream waits only, never the device's: a device-wide synchronise on another thread (a
  // trainer on this GPU) fails while this one captures, so none is made here either.
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream();
  current.synchronize();  // The input copy, on the current stream, is done.
  {
    c10::cuda::CUDAStreamGuard guard(side);
    step();
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    // Thread-local capture: other threads (a trainer on this GPU) may keep
    // allocating while this thread captures.
    graph->capture_begin(pool_, cudaStreamCaptureModeThreadLocal);
    try {
      g->hidden = step();
    } catch (...) {
      // Leave capture mode (this thread's CUDA calls are restricted while
      // it lasts) before the caller falls back to eager decoding.
      try {
        graph->capture_end();
      } catch (...) {
      }
      cudaStreamCaptureStatus status;
      if (cudaStreamIsCapturing(side.stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
        cudaGraph_t partial = nullptr;
        cudaStreamEndCapture(side.stream(), &partial);
        if (partial != nullptr) cudaGraphDestroy(partial);
      }
      throw;
    }
    graph->capture_end();
    if (pool_.first == 0 && pool_.second == 0) pool_ = graph->pool();
    g->graph = std::move(graph);
  }
  side.synchronize();  // The warm-up step's writes are done before the replay, on the current stream.
  g->graph->replay();
  return g->hidden;
}

}  // namespace kernelrl::learner
