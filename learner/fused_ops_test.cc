// Fused ops against plain ATen autograd, forward and backward. CPU (fp32)
// always; CUDA (fp32 and bf16) wherever a GPU is present (tools/device_learner.sh
// on the GPU machine), skipped with the reason only where there is none.
#include "learner/fused_ops.h"

#include <gtest/gtest.h>

#include "learner/device_case_test_util.h"

#include <cstdlib>
#include <string>
#include <tuple>

namespace kernelrl::learner {
namespace {

using testing::DeviceCase;

class FusedOpsTest : public testing::DeviceCaseTest {
 public:
  void SetUp() override {
    DeviceCaseTest::SetUp();
    if (IsSkipped()) return;
    at::manual_seed(1234);
  }
  void ExpectCloseFor(const at::Tensor& got, const at::Tensor& want, const std::string& what) const {
    ExpectClose(got, want, what);
  }
  // Relative L2 error: bf16 results differ from an fp32 reference by
  // rounding (~2^-8), fp32 ones by summation order only.
  void ExpectClose(const at::Tensor& got, const at::Tensor& want, const std::string& what) const {
    const double err = (got.to(at::kDouble) - want.to(at::kDouble)).norm().item<double>() /
                       (want.to(at::kDouble).norm().item<double>() + 1e-30);
    EXPECT_LT(err, half() ? 1e-2 : 1e-5) << what;
    EXPECT_FALSE(got.isnan().any().item<bool>()) << what;
  }
};

at::Tensor RotateHalf(const at::Tensor& x) {
  const int64_t h = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
}

TEST_P(FusedOpsTest, RopeSplitMatchesEagerForwardAndBackward) {
  const int64_t B = 2, T = 37, nh = 6, kvh = 2, D = 16;
  const int64_t C = (nh + 2 * kvh) * D;
  at::Tensor qkv = at::randn({B, T, C}, opts());
  at::Tensor cos = at::rand({B, 1, T, D}, opts()) * 2 - 1;
  at::Tensor sin = at::rand({B, 1, T, D}, opts()) * 2 - 1;
  std::vector<at::Tensor> up = {at::randn({B, nh, T, D}, opts()), at::randn({B, kvh, T, D}, opts()),
                                at::randn({B, kvh, T, D}, opts())};

  at::Tensor x = qkv.detach().clone().requires_grad_(true);
  auto out = FusedRopeSplit(x, cos, sin, {static_cast<int>(nh), static_cast<int>(kvh), static_cast<int>(D)});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(out[0].is_contiguous() && out[1].is_contiguous() && out[2].is_contiguous());
  (out[0] * up[0] + 0).sum().add((out[1] * up[1]).sum()).add((out[2] * up[2]).sum()).backward();

  at::Tensor xr = qkv.detach().to(at::kFloat).clone().requires_grad_(true);
  at::Tensor heads = xr.view({B, T, nh + 2 * kvh, D}).transpose(1, 2);
  at::Tensor cf = cos.to(at::kFloat), sf = sin.to(at::kFloat);
  at::Tensor q = heads.narrow(1, 0, nh), k = heads.narrow(1, nh, kvh), v = heads.narrow(1, nh + kvh, kvh);
  q = q * cf + RotateHalf(q) * sf;
  k = k * cf + RotateHalf(k) * sf;
  ((q * up[0].to(at::kFloat)).sum() + (k * up[1].to(at::kFloat)).sum() + (v * up[2].to(at::kFloat)).sum())
      .backward();

  ExpectClose(out[0], q.detach(), "q");
  ExpectClose(out[1], k.detach(), "k");
  ExpectClose(out[2], v.detach(), "v");
  ExpectClose(x.grad(), xr.grad(), "d qkv");
}

TEST_P(FusedOpsTest, SwiGluMatchesEagerForwardAndBackward) {
  // 64: the vectorised CUDA path; 13: the scalar one (rows not 16-byte multiples).
  for (int64_t inter : {64, 13}) {
    at::Tensor gu = at::randn({3, 5, 2 * inter}, opts()) * 3;
    at::Tensor dy = at::randn({3, 5, inter}, opts());
    at::Tensor x = gu.detach().clone().requires_grad_(true);
    at::Tensor y = FusedSwiGlu(x);
    y.backward(dy);
    at::Tensor xr = gu.detach().to(at::kFloat).clone().requires_grad_(true);
    auto g_u = xr.split(inter, -1);
    at::Tensor yr = at::silu(g_u[0]) * g_u[1];
    yr.backward(dy.to(at::kFloat));
    ExpectClose(y, yr.detach(), "swiglu y, I=" + std::to_string(inter));
    ExpectClose(x.grad(), xr.grad(), "swiglu d gu, I=" + std::to_string(inter));
  }
}

// keep_bytes: huge keeps the logits for backward; 0 recomputes them in
// chunks of 4096 rows (n = 4100 crosses a chunk boundary).
void CheckLogprobs(FusedOpsTest* t, const at::TensorOptions& o, int64_t n, int64_t vocab, double temperature,
                   int64_t keep_bytes) {
  const int64_t H = 24;
  at::Tensor h = at::randn({n, H}, o);
  at::Tensor w = at::randn({vocab, H}, o) * 0.5;
  at::Tensor targets = at::randint(0, vocab, {n}, o.dtype(at::kLong));
  targets.index_put_({at::arange(0, n, 7, o.dtype(at::kLong))}, -1);  // ignored positions
  at::Tensor up = at::randn({n}, o.dtype(at::kFloat));

  at::Tensor hx = h.detach().clone().requires_grad_(true), wx = w.detach().clone().requires_grad_(true);
  at::Tensor logp = FusedTokenLogprobs(hx, wx, targets, 1.0 / temperature, keep_bytes);
  ASSERT_EQ(logp.scalar_type(), at::kFloat);
  (logp * up).sum().backward();

  // Reference: the same bf16 logits (one rounding, as the GEMM), fp32 after.
  at::Tensor hr = h.detach().clone().requires_grad_(true), wr = w.detach().clone().requires_grad_(true);
  at::Tensor logits = at::mm(hr, wr.t()).to(at::kFloat) / temperature;
  at::Tensor valid = targets.ge(0);
  at::Tensor ref = at::log_softmax(logits, -1).gather(1, targets.clamp_min(0).unsqueeze(1)).squeeze(1) *
                   valid.to(at::kFloat);
  (ref * up).sum().backward();
  const std::string what = "n=" + std::to_string(n) + " V=" + std::to_string(vocab) +
                           " T=" + std::to_string(temperature) + " keep=" + std::to_string(keep_bytes);
  t->ExpectCloseFor(logp, ref.detach(), "logp " + what);
  t->ExpectCloseFor(hx.grad(), hr.grad(), "d hidden " + what);
  t->ExpectCloseFor(wx.grad(), wr.grad(), "d weight " + what);
  EXPECT_TRUE(logp.masked_select(valid.logical_not()).eq(0).all().item<bool>()) << "ignored positions give 0";
}

TEST_P(FusedOpsTest, TokenLogprobsKeptLogits) { CheckLogprobs(this, opts(), 50, 1000, 1.0, int64_t{1} << 40); }
TEST_P(FusedOpsTest, TokenLogprobsOddVocabAndTemperature) { CheckLogprobs(this, opts(), 33, 1001, 0.7, int64_t{1} << 40); }
TEST_P(FusedOpsTest, TokenLogprobsRecomputedInChunks) { CheckLogprobs(this, opts(), 4100, 96, 1.0, 0); }

TEST_P(FusedOpsTest, TokenLogprobsBackwardTwiceRecomputes) {
  // The kept logits are overwritten by the first backward; a second one
  // (retain_graph) must recompute them and give the same gradient.
  at::Tensor h = at::randn({20, 8}, opts()).requires_grad_(true);
  at::Tensor w = at::randn({64, 8}, opts());
  at::Tensor targets = at::randint(0, 64, {20}, opts().dtype(at::kLong));
  at::Tensor loss = FusedTokenLogprobs(h, w, targets, 1.0, int64_t{1} << 40).sum();
  loss.backward({}, /*retain_graph=*/true);
  at::Tensor first = h.grad().clone();
  h.grad().zero_();
  loss.backward();
  ExpectClose(h.grad(), first, "second backward");
}

INSTANTIATE_TEST_SUITE_P(Devices, FusedOpsTest,
                         ::testing::Values(DeviceCase{"cpu", at::kFloat}, DeviceCase{"cuda", at::kFloat},
                                           DeviceCase{"cuda", at::kBFloat16}),
                         testing::DeviceCaseName);

}  // namespace
}  // namespace kernelrl::learner
