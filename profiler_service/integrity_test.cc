#include "profiler_service/integrity.h"

#include <algorithm>

#include "gtest/gtest.h"
#include "profiler_service/profiler_defaults.h"
#include "profiler_service/test_util.h"

namespace kernelrl {
namespace {

using testing_util::AddActivity;
using testing_util::NoisyRun;

bool Has(const IntegrityReport& r, const std::string& f) {
  return std::find(r.flags.begin(), r.flags.end(), f) != r.flags.end();
}

ProfileMeasurement Measurement() {
  ProfileMeasurement m;
  *m.mutable_candidate() = NoisyRun(100.0, 20, 0.001, 1);
  m.mutable_candidate()->set_harness_thread_id(100);
  m.mutable_candidate()->add_harness_stream_ids(7);
  m.add_candidate_symbols("_Z9my_kernelPKfPfi");
  return m;
}

const ProfilerConfig& Config() {
  static const ProfilerConfig c = WithProfilerDefaults(ProfilerConfig());
  return c;
}

TEST(Integrity, HonestCandidateHasNoFlags) {
  ProfileMeasurement m = Measurement();
  AddActivity(m.mutable_candidate(), "_Z9my_kernelPKfPfi", 1900.0);
  AddActivity(m.mutable_candidate(), "memset", 100.0, 7, 100, "memset");
  const IntegrityReport r = AnalyzeIntegrity(m, LibraryPolicy(), Config());
  EXPECT_TRUE(r.flags.empty()) << r.flags.front();
  EXPECT_DOUBLE_EQ(r.coverage.own_kernel_us(), 1900.0);
  EXPECT_DOUBLE_EQ(r.coverage.memcpy_us(), 100.0);
  EXPECT_NEAR(r.own_share, 1.0, 1e-9);  // copies are the hand-over's, not counted in the share
  ASSERT_EQ(r.coverage.kernels_size(), 2);
  EXPECT_EQ(r.coverage.kernels(0).origin(), "candidate");
  EXPECT_EQ(r.coverage.kernels(0).name(), "my_kernel(float const*, float*, int)");
}

// The executor's window may hold the harness's own work too (krv_ kernels, the
// fallback copy of an output into the exchange: memcpy). Neither dilutes the
// candidate's share.
TEST(Integrity, HarnessWorkInTheWindowIsNotTheCandidates) {
  ProfileMeasurement m = Measurement();
  AddActivity(m.mutable_candidate(), "_Z9my_kernelPKfPfi", 1000.0);
  AddActivity(m.mutable_candidate(), "_Z14krv_xor_kernelPyyy", 900.0);
  AddActivity(m.mutable_candidate(), "memcpy_DtoD", 900.0, 7, 100, "memcpy");
  const IntegrityReport r = AnalyzeIntegrity(m, LibraryPolicy(), Config());
  EXPECT_TRUE(r.flags.empty()) << r.flags.front();
  EXPECT_NEAR(r.own_share, 1.0, 1e-9);
  // A torch kernel of the candidate's own still counts against it.
  AddActivity(m.mutable_candidate(), "_ZN2at6native29vectorized_elementwise_kernelIiEEvv", 1000.0);
  EXPECT_NEAR(AnalyzeIntegrity(m, LibraryPolicy(), Config()).own_share, 0.5, 1e-9);
}

TEST(Integrity, LibraryOnlyCandidateWherePolicyForbidsIt) {
  ProfileMeasurement m = Measurement();
  AddActivity(m.mutable_candidate(), "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT", 2000.0);
  const IntegrityReport r = AnalyzeIntegrity(m, LibraryPolicy(), Config());
  EXPECT_TRUE(Has(r, "library_only"));
  EXPECT_TRUE(Has(r, "no_candidate_kernels"));
  EXPECT_TRUE(Has(r, "forbidden_library_cublas"));
  EXPECT_TRUE(Has(r, "own_kernel_share_below_min"));
}

TEST(Integrity, AllowedLibraryAloneIsTheCandidatesWork) {
  // A GEMM task: cuBLASLt adds the bias and applies the ReLU as it stores (no
  // kernel of the candidate's own); the harness's copy beside it counts for nothing.
  ProfileMeasurement m = Measurement();
  AddActivity(m.mutable_candidate(), "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x16_bias_relu", 2000.0);
  AddActivity(m.mutable_candidate(), "memcpy_DtoD", 50.0, 7, 100, "memcpy");
  LibraryPolicy p;
  p.set_allow_cublas(true);
  IntegrityReport r = AnalyzeIntegrity(m, p, Config());
  EXPECT_TRUE(r.flags.empty()) << r.flags.front();
  EXPECT_DOUBLE_EQ(r.own_share, 1.0);
  // The same library call where the policy forbids it.
  r = AnalyzeIntegrity(m, LibraryPolicy(), Config());
  EXPECT_TRUE(Has(r, "library_only"));
  EXPECT_TRUE(Has(r, "no_candidate_kernels"));
  EXPECT_TRUE(Has(r, "forbidden_library_cublas"));
  // Allowed cuBLAS with a torch op doing the epilogue and no kernel of its own:
  // above the share (1500 / 1600), still not the candidate's work.
  AddActivity(m.mutable_candidate(), "triton_poi_fused_relu_0", 100.0);
  r = AnalyzeIntegrity(m, p, Config());
  EXPECT_TRUE(Has(r, "no_candidate_kernels"));
  EXPECT_TRUE(Has(r, "library_only"));
  EXPECT_FALSE(Has(r, "own_kernel_share_below_min"));
}

TEST(Integrity, AllowedLibraryCountsTowardTheShare) {
  // A GEMM task: cuBLAS does the GEMM, the candidate's own kernel the epilogue.
  ProfileMeasurement m = Measurement();
  AddActivity(m.mutable_candidate(), "nvjet_tst_128x256", 1500.0);
  AddActivity(m.mutable_candidate(), "_Z9my_kernelPKfPfi", 500.0);
  LibraryPolicy p;
  p.set_allow_cublas(true);
  IntegrityReport r = AnalyzeIntegrity(m, p, Config());
  EXPECT_TRUE(r.flags.empty());
  EXPECT_DOUBLE_EQ(r.own_share, 1.0);
  // Where the policy forbids cuBLAS the same profile is flagged twice.
  r = AnalyzeIntegrity(m, LibraryPolicy(), Config());
  EXPECT_TRUE(Has(r, "forbidden_library_cublas"));
  EXPECT_TRUE(Has(r, "own_kernel_share_below_min"));  // 25% < 50%.
  // Allowed cuBLAS does not cover torch ops doing the rest of the work.
  ProfileMeasurement t = Measurement();
  AddActivity(t.mutable_candidate(), "nvjet_tst_128x256", 300.0);
  AddActivity(t.mutable_candidate(), "_Z9my_kernelPKfPfi", 100.0);
  AddActivity(t.mutable_candidate(), "triton_poi_fused_relu_0", 1600.0);
  r = AnalyzeIntegrity(t, p, Config());
  EXPECT_TRUE(Has(r, "own_kernel_share_below_min"));  // (300 + 100) / 2000 = 20%.
}

TEST(Integrity, TorchOpsInsteadOfOwnKernels) {
  ProfileMeasurement m = Measurement();
  AddActivity(m.mutable_candidate(), "_Z9my_kernelPKfPfi", 100.0);
  AddActivity(m.mutable_candidate(), "triton_poi_fused_relu_0", 900.0);
  const IntegrityReport r = AnalyzeIntegrity(m, LibraryPolicy(), Config());
  EXPECT_TRUE(Has(r, "own_kernel_share_below_min"));
  EXPECT_DOUBLE_EQ(r.coverage.other_kernel_us(), 900.0);
}

TEST(Integrity, SideStreamAndForeignThread) {
  ProfileMeasurement m = Measurement();
  AddActivity(m.mutable_candidate(), "_Z9my_kernelPKfPfi", 1000.0, /*stream=*/13, /*thread=*/100);
  IntegrityReport r = AnalyzeIntegrity(m, LibraryPolicy(), Config());
  EXPECT_TRUE(Has(r, "side_stream"));
  EXPECT_FALSE(Has(r, "foreign_launch_thread"));
  EXPECT_EQ(r.coverage.num_streams(), 1);

  m = Measurement();
  AddActivity(m.mutable_candidate(), "_Z9my_kernelPKfPfi", 1000.0, 7, /*thread=*/4242);
  r = AnalyzeIntegrity(m, LibraryPolicy(), Config());
  EXPECT_TRUE(Has(r, "foreign_launch_thread"));
  EXPECT_FALSE(Has(r, "side_stream"));
}

TEST(Integrity, WorkEscapingTheWindowIsFlagged) {
  ProfileMeasurement m = Measurement();
  AddActivity(m.mutable_candidate(), "_Z9my_kernelPKfPfi", 1000.0);
  m.mutable_candidate()->set_outside_window_gpu_us(40.0);  // 4%: tolerated.
  EXPECT_FALSE(Has(AnalyzeIntegrity(m, LibraryPolicy(), Config()), "work_outside_window"));
  m.mutable_candidate()->set_outside_window_gpu_us(900.0);
  EXPECT_TRUE(Has(AnalyzeIntegrity(m, LibraryPolicy(), Config()), "work_outside_window"));
}

TEST(Integrity, CpuBackendHasNoActivityAndNoFlags) {
  ProfileMeasurement m;
  *m.mutable_candidate() = NoisyRun(100.0, 20, 0.001, 1, 1.0, "cpu");
  EXPECT_TRUE(AnalyzeIntegrity(m, LibraryPolicy(), Config()).flags.empty());
}

}  // namespace
}  // namespace kernelrl
