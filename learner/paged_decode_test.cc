// Paged decode attention against plain attention in fp64 over each
// sequence's gathered keys. CPU (fp32: the kernels' partition and merge
// rules) always; CUDA (bf16 and fp16, the tensor-core kernels) wherever a
// GPU is present
// (tools/device_engine.sh on the GPU machine), skipped with the reason only
// where there is none.
#include "learner/paged_decode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "learner/device_case_test_util.h"

namespace kernelrl::learner {
namespace {

using testing::DeviceCase;

struct Shape {
  int64_t seqs, heads, kv_heads, head_dim, block_size, blocks, width;
};

class PagedDecodeTest : public testing::DeviceCaseTest {
 public:
  void SetUp() override {
    DeviceCaseTest::SetUp();
    if (IsSkipped()) return;
    at::manual_seed(std::random_device{}());
  }

  // Random cache, block tables (distinct blocks per sequence, shared across
  // sequences, in shuffled order) and positions (0, the table's last key and
  // random ones in between); the kernel's output against fp64 attention.
  void Check(const Shape& s, int partitions) {
    std::mt19937 rng(static_cast<uint32_t>(at::randint(1 << 30, {1}).item<int64_t>()));
    at::Tensor kc = at::randn({s.kv_heads, s.blocks, s.block_size, s.head_dim}, opts());
    at::Tensor vc = at::randn({s.kv_heads, s.blocks, s.block_size, s.head_dim}, opts());
    at::Tensor q = at::randn({s.seqs, s.heads, s.head_dim}, opts());
    std::vector<int64_t> table(s.seqs * s.width), positions(s.seqs);
    std::vector<int64_t> ids(s.blocks);
    for (int64_t i = 0; i < s.blocks; ++i) ids[i] = i;
    const int64_t max_keys = s.width * s.block_size;
    for (int64_t i = 0; i < s.seqs; ++i) {
      std::shuffle(ids.begin(), ids.end(), rng);
      std::copy(ids.begin(), ids.begin() + s.width, table.begin() + i * s.width);
      positions[i] = i == 0 ? 0 : i == 1 ? max_keys - 1 : static_cast<int64_t>(rng() % max_keys);
    }
    at::Tensor table_t = at::tensor(table, at::kLong).view({s.seqs, s.width}).to(device());
    at::Tensor pos_t = at::tensor(positions, at::kLong).to(device());
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
    at::Tensor got = PagedDecodeAttention(q, kc, vc, table_t, pos_t, scale, partitions);
    ASSERT_EQ(got.sizes(), q.sizes());
    ASSERT_EQ(got.scalar_type(), q.scalar_type());

    const int64_t G = s.heads / s.kv_heads;
    at::Tensor kd = kc.to(at::kCPU, at::kDouble), vd = vc.to(at::kCPU, at::kDouble), qd = q.to(at::kCPU, at::kDouble);
    std::vector<at::Tensor> want;
    for (int64_t i = 0; i < s.seqs; ++i) {
      at::Tensor blocks = at::tensor(std::vector<int64_t>(table.begin() + i * s.width,
                                                          table.begin() + (i + 1) * s.width), at::kLong);
      const int64_t n = positions[i] + 1;
      at::Tensor k = kd.index_select(1, blocks).reshape({s.kv_heads, -1, s.head_dim}).narrow(1, 0, n);
      at::Tensor v = vd.index_select(1, blocks).reshape({s.kv_heads, -1, s.head_dim}).narrow(1, 0, n);
      at::Tensor qi = qd[i].view({s.kv_heads, G, s.head_dim});
      at::Tensor p = at::softmax(at::bmm(qi, k.transpose(1, 2)) * scale, -1);  // [kvh,G,n]
      want.push_back(at::bmm(p, v).reshape({s.heads, s.head_dim}));
    }
    at::Tensor w = at::stack(want), g = got.to(at::kCPU, at::kDouble);
    const double err = (g - w).norm().item<double>() / w.norm().item<double>();
    EXPECT_LT(err, half() ? 1e-2 : 1e-5) << "relative L2 error, partitions " << partitions;
    EXPECT_FALSE(got.isnan().any().item<bool>());
  }
};

TEST_P(PagedDecodeTest, GroupedHeadsOverSharedShuffledBlocks) {
  // Qwen2.5-0.5B's head layout (14 query heads over 2 KV heads, D 64).
  const Shape s{9, 14, 2, 64, 16, 40, 12};
  for (int partitions : {1, 3, 0}) Check(s, partitions);
}

TEST_P(PagedDecodeTest, MoreSplitsThanKeysLeaveEmptyPartitions) {
  // Qwen2.5-7B's layout (28 over 4, D 128); 64 keys over 16 partitions of
  // a 16-key tile each: all but the first four empty.
  const Shape s{5, 28, 4, 128, 16, 12, 4};
  Check(s, 16);
}

TEST_P(PagedDecodeTest, EveryHeadSizeAndGroup) {
  Check({3, 8, 8, 32, 16, 6, 3}, 2);   // Multi-head (group 1), D 32.
  Check({4, 8, 1, 256, 16, 20, 3}, 3);  // One KV head for 8 query heads, D 256.
  Check({3, 32, 2, 64, 16, 10, 4}, 1);  // A full tile of 16 query heads per KV head.
}

TEST_P(PagedDecodeTest, LongSequencesTakeSeveralSoftmaxSteps) {
  // 640 keys: in one partition, several of the tensor-core path's chunks
  // (256 keys at D <= 128, 128 above), each rescaling the running output.
  for (int partitions : {1, 2, 0}) Check({6, 28, 4, 128, 16, 260, 40}, partitions);
  for (int partitions : {1, 0}) Check({4, 14, 2, 64, 32, 40, 20}, partitions);  // Blocks of 32 keys.
  Check({3, 8, 1, 256, 16, 60, 20}, 1);
}

TEST_P(PagedDecodeTest, RefusesShapesItDoesNotTake) {
  EXPECT_FALSE(PagedDecodeSupported(at::zeros({2, 17, 64}, opts()), 1, 16));  // Group of 17.
  EXPECT_FALSE(PagedDecodeSupported(at::zeros({2, 4, 80}, opts()), 2, 16));   // D 80.
  EXPECT_FALSE(PagedDecodeSupported(at::zeros({2, 4, 64}, opts()), 3, 16));   // 4 heads over 3.
  EXPECT_FALSE(PagedDecodeSupported(at::zeros({2, 4, 64}, opts()), 2, 8));    // Blocks of 8 keys.
  EXPECT_TRUE(PagedDecodeSupported(at::zeros({2, 4, 64}, opts()), 2, 16));
  // The other element types of this device are refused (CUDA: 16-bit; CPU: fp32).
  const at::ScalarType other = device().is_cuda() ? at::kFloat : at::kBFloat16;
  EXPECT_FALSE(PagedDecodeSupported(at::zeros({2, 4, 64}, opts().dtype(other)), 2, 16));
  at::Tensor cache = at::zeros({2, 4, 16, 64}, opts());
  at::Tensor table = at::zeros({2, 2}, at::TensorOptions().device(device()).dtype(at::kLong));
  at::Tensor pos = at::zeros({3}, at::TensorOptions().device(device()).dtype(at::kLong));
  EXPECT_THROW(PagedDecodeAttention(at::zeros({2, 4, 64}, opts()), cache, cache, table, pos, 0.125), c10::Error);
}

std::vector<DeviceCase> Cases() {
  return {{"cpu", at::kFloat}, {"cuda", at::kBFloat16}, {"cuda", at::kHalf}};
}

INSTANTIATE_TEST_SUITE_P(Devices, PagedDecodeTest, ::testing::ValuesIn(Cases()), testing::DeviceCaseName);

}  // namespace
}  // namespace kernelrl::learner
