// A unit that includes both LibTorch and generated protos compiles against the
// system protobuf (the torch wheel ships an older private copy of its headers,
// which third_party/system_libs.bzl keeps off the include path), and both work.
#include <torch/torch.h>

#include "google/protobuf/stubs/common.h"
#include "gtest/gtest.h"
#include "proto/verdict.pb.h"

namespace {

TEST(TorchProtoHeadersTest, BothLibrariesInOneUnit) {
  EXPECT_EQ(GOOGLE_PROTOBUF_VERSION / 1000000, 3);  // Debian's protobuf 3.21, not the wheel's copy.
  kernelrl::v1::Verdict verdict;
  verdict.set_outcome(kernelrl::v1::Verdict::OK);
  torch::manual_seed(7);
  const torch::Tensor t = torch::randn({64});
  verdict.set_speedup_vs_eager(t.abs().sum().item<double>());
  kernelrl::v1::Verdict parsed;
  ASSERT_TRUE(parsed.ParseFromString(verdict.SerializeAsString()));
  EXPECT_DOUBLE_EQ(parsed.speedup_vs_eager(), t.abs().sum().item<double>());
}

}  // namespace
