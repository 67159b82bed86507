#include "profiler_service/kernel_classifier.h"

#include "gtest/gtest.h"

namespace kernelrl {
namespace {

TEST(KernelClassifier, CandidateSymbolsWinMangledOrPlain) {
  const KernelClassifier c({"_Z11relu_kernelPKfPfl", "fused_gemm_bias"});
  EXPECT_EQ(c.Classify("_Z11relu_kernelPKfPfl", "kernel"), "candidate");
  // extern "C" name that also matches a library pattern: the candidate's own.
  EXPECT_EQ(c.Classify("fused_gemm_bias", "kernel"), "candidate");
  // Same base name, different template instance / args still counts.
  EXPECT_EQ(c.Classify("relu_kernel", "kernel"), "candidate");
}

TEST(KernelClassifier, LibraryAndTorchPatterns) {
  const KernelClassifier c({});
  EXPECT_EQ(c.Classify("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT", "kernel"), "cublas");
  EXPECT_EQ(c.Classify("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32", "kernel"), "cublas");
  EXPECT_EQ(c.Classify("sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nchw", "kernel"), "cudnn");
  EXPECT_EQ(c.Classify("cudnn::engines_precompiled::nchwToNhwcKernel", "kernel"), "cudnn");
  EXPECT_EQ(c.Classify(
                "_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_21clamp_min_kernel_cudaERNS_"
                "18TensorIteratorBaseERKN3c106ScalarEENKUlvE_clEvENKUlvE5_clEvEUlfE_St5arrayIPcLm2EEEEvi"
                "T0_T1_",
                "kernel"),
            "torch");
  EXPECT_EQ(c.Classify("triton_poi_fused_relu_0", "kernel"), "torch");
  EXPECT_EQ(c.Classify("my_unknown_kernel", "kernel"), "other");
  EXPECT_EQ(c.Classify("memcpy_DtoD", "memcpy"), "copy");
  EXPECT_EQ(c.Classify("memset", "memset"), "copy");
}

TEST(KernelClassifier, BaseNameStripsReturnTypeAndArguments) {
  EXPECT_EQ(BaseName("void ns::k<float, (int)4>(float*, int)"), "ns::k<float, (int)4>");
  EXPECT_EQ(BaseName("plain"), "plain");
  EXPECT_EQ(Demangle("_Z11relu_kernelPKfPfl"), "relu_kernel(float const*, float*, long)");
}

}  // namespace
}  // namespace kernelrl
