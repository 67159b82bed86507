#include "learner/paged_decode.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <vector>

#include "learner/fused_ops.h"
#include "learner/kernels/paged_decode.h"
#include "learner/kernels/paged_decode_math.h"

namespace kernelrl::learner {
namespace {

namespace k = kernels;

// The CUDA kernels' algorithm on the CPU: per (sequence, KV head,
// partition) an online softmax over the partition's keys for each query
// head of the group, then the partitions merged by the same rule.
void PagedDecodeCpu(const float* q, const float* kc, const float* vc, const int64_t* table, const int64_t* positions,
                    float* out, const k::PagedDecodeShape& s) {
  const int D = s.head_dim, G = s.heads / s.kv_heads;
  const int64_t max_keys = s.table_width * s.block_size;
  const float qscale = s.scale * k::kLog2E;
  std::vector<float> qs(D), acc(static_cast<size_t>(s.partitions) * D);
  std::vector<k::SoftmaxState> st(s.partitions);
  for (int64_t seq = 0; seq < s.seqs; ++seq) {
    for (int h = 0; h < s.kv_heads; ++h) {
      const int64_t head_rows = int64_t{h} * s.cache_blocks * s.block_size;
      for (int g = 0; g < G; ++g) {
        const int64_t head = seq * s.heads + h * G + g;
        for (int e = 0; e < D; ++e) qs[e] = q[head * D + e] * qscale;
        for (int p = 0; p < s.partitions; ++p) {
          k::SoftmaxState& ps = st[p];
          ps = k::SoftmaxEmpty();
          float* a = &acc[static_cast<size_t>(p) * D];
          std::fill(a, a + D, 0.0f);
          const k::KeyRange keys = k::PartitionRange(max_keys, s.partitions, p, positions[seq]);
          for (int64_t t = keys.begin; t < keys.end; ++t) {
            const int64_t off = (head_rows + table[seq * s.table_width + t / s.block_size] * s.block_size +
                                 t % s.block_size) * D;
            float sc = 0.0f;
            for (int e = 0; e < D; ++e) sc += qs[e] * kc[off + e];
            const float m = std::max(ps.m, sc), corr = k::Rescale(ps.m, m), w = exp2f(sc - m);
            ps.l = ps.l * corr + w;
            for (int e = 0; e < D; ++e) a[e] = a[e] * corr + w * vc[off + e];
            ps.m = m;
          }
        }
        float m = -INFINITY, l = 0.0f;
        for (const auto& ps : st) m = std::max(m, ps.m);
        float* o = out + head * D;
        std::fill(o, o + D, 0.0f);
        for (int p = 0; p < s.partitions; ++p) {
          const float r = k::Rescale(st[p].m, m);
          l += st[p].l * r;
          for (int e = 0; e < D; ++e) o[e] += acc[static_cast<size_t>(p) * D + e] * r;
        }
        for (int e = 0; e < D; ++e) o[e] = l > 0.0f ? o[e] / l : 0.0f;
      }
    }
  }
}

}  // namespace

bool PagedDecodeSupported(at::Device device, at::ScalarType dtype, int64_t heads, int64_t kv_heads, int64_t head_dim,
                          int64_t block_size) {
  if (!k::PagedDecodeSupported(static_cast<int>(heads), static_cast<int>(kv_heads), static_cast<int>(head_dim),
                               block_size)) {
    return false;
  }
  if (device.is_cuda()) return dtype == at::kBFloat16 || dtype == at::kHalf;
  return device.is_cpu() && dtype == at::kFloat;
}

bool PagedDecodeSupported(const at::Tensor& q, int64_t kv_heads, int64_t block_size) {
  return q.dim() == 3 && (!q.is_cuda() || q.size(0) <= 65535) &&
         PagedDecodeSupported(q.device(), q.scalar_type(), q.size(1), kv_heads, q.size(2), block_size);
}

at::Tensor PagedDecodeAttention(const at::Tensor& q_in, const at::Tensor& k_cache, const at::Tensor& v_cache,
                                const at::Tensor& table_in, const at::Tensor& positions_in, double scale,
                                int partitions) {
  TORCH_CHECK(k_cache.dim() == 4 && k_cache.sizes() == v_cache.sizes() && k_cache.is_contiguous() &&
                  v_cache.is_contiguous(),
              "PagedDecodeAttention: k/v caches must be contiguous [kv_heads, blocks, block_size, D], got ",
              k_cache.sizes(), " and ", v_cache.sizes());
  TORCH_CHECK(PagedDecodeSupported(q_in, k_cache.size(0), k_cache.size(2)), "PagedDecodeAttention: q ", q_in.sizes(),
              " ", q_in.scalar_type(), " on ", q_in.device(), " with ", k_cache.size(0), " KV heads in blocks of ",
              k_cache.size(2), " is not supported");
  const at::Tensor q = q_in.contiguous();
  const at::Tensor table = table_in.to(at::kLong).contiguous(), positions = positions_in.to(at::kLong).contiguous();
  const int64_t S = q.size(0);
  TORCH_CHECK(q.scalar_type() == k_cache.scalar_type() && q.device() == k_cache.device() &&
                  k_cache.size(3) == q.size(2),
              "PagedDecodeAttention: q and the cache disagree in dtype, device or head size");
  TORCH_CHECK(table.dim() == 2 && table.size(0) == S && positions.numel() == S && table.device() == q.device() &&
                  positions.device() == q.device(),
              "PagedDecodeAttention: table ", table.sizes(), " and positions ", positions.sizes(), " must have ", S,
              " rows on ", q.device());
  k::PagedDecodeShape s;
  s.seqs = S;
  s.heads = static_cast<int>(q.size(1));
  s.kv_heads = static_cast<int>(k_cache.size(0));
  s.head_dim = static_cast<int>(q.size(2));
  s.table_width = table.size(1);
  s.cache_blocks = k_cache.size(1);
  s.block_size = k_cache.size(2);
  s.scale = static_cast<float>(scale);
  const int64_t max_keys = s.table_width * s.block_size;
  at::Tensor out = at::empty_like(q);
  if (!q.is_cuda()) {
    s.partitions = partitions > 0 ? partitions : k::PagedDecodePartitions(S, s.kv_heads, max_keys, 1);
    PagedDecodeCpu(q.data_ptr<float>(), k_cache.data_ptr<float>(), v_cache.data_ptr<float>(),
                   table.data_ptr<int64_t>(), positions.data_ptr<int64_t>(), out.data_ptr<float>(), s);
    return out;
  }
  c10::cuda::CUDAGuard guard(q.device());
  s.partitions = partitions > 0 ? partitions
                                : k::PagedDecodePartitions(S, s.kv_heads, max_keys,
                                                           at::cuda::getCurrentDeviceProperties()->multiProcessorCount);
  at::Tensor partial, stats;
  if (s.partitions > 1) {
    partial = at::empty({S, s.heads, s.partitions, s.head_dim}, q.options().dtype(at::kFloat));
    stats = at::empty({S, s.heads, s.partitions, 2}, q.options().dtype(at::kFloat));
  }
  const int code = k::PagedDecodeAttention(
      KernelDType(q), q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), table.data_ptr<int64_t>(),
      positions.data_ptr<int64_t>(), partial.defined() ? partial.data_ptr<float>() : nullptr,
      stats.defined() ? stats.data_ptr<float>() : nullptr, out.data_ptr(), s,
      c10::cuda::getCurrentCUDAStream(q.device().index()).stream());
  TORCH_CHECK(code == 0, "PagedDecodeAttention: ", k::ErrorString(code));
  return out;
}

}  // namespace kernelrl::learner
