// Compile stage: real g++ (and nvcc when installed) in the contained child;
// structured diagnostics, cache hits, limits.
#include "sandbox/compile_stage.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"
#include "sandbox/child_env.h"
#include "sandbox/contain/contain.h"
#include "sandbox/evaluator.h"
#include "sandbox/diagnostics.h"
#include "sandbox/workspace.h"

namespace kernelrl::sandbox {
namespace {

class CompileStageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/compile_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::system(("mkdir -p " + root_).c_str());
    config_.set_cache_dir(root_ + "/cache");
    config_.mutable_compile()->set_wall_seconds(60);
    ResolveChildEnvironmentFromHost(&config_);  // What the worker's main does at start.
    config_ = WithDefaults(config_);            // What the evaluator does before it builds its stages.
    caps_ = ProbeHostCapabilities();
  }
  CompileResult Build(const Workspace& ws, const std::string& backend, const std::string& name) {
    ValidatedWorkspace v;
    WorkspaceRejection why;
    EXPECT_TRUE(ValidateWorkspace(ws, {}, backend, &v, &why)) << why.reason;
    const std::string dir = root_ + "/" + name;
    EXPECT_TRUE(MaterializeWorkspace(v, dir).ok());
    CompileStage stage(config_, "sandbox/harness", caps_);
    auto r = stage.Compile(v, dir);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : CompileResult();
  }
  std::string root_;
  SandboxConfig config_;
  int caps_ = 0;
};

Workspace CpuWs(const std::string& kernel) {
  Workspace ws;
  auto* f = ws.add_files();
  f->set_path("model_new.py");
  f->set_content("class ModelNew: pass\n");
  f = ws.add_files();
  f->set_path("kernels/k.cc");
  f->set_content(kernel);
  return ws;
}

TEST_F(CompileStageTest, BuildsASharedLibraryAndCachesIt) {
  const std::string src = "extern \"C\" int add1(float* x, long long n) { for (long long i = 0; i < n; ++i) x[i] += 1; return 0; }\n";
  CompileResult first = Build(CpuWs(src), "cpu", "a");
  ASSERT_TRUE(first.ok) << first.summary << first.log;
  EXPECT_FALSE(first.cache_hit);
  EXPECT_TRUE(std::ifstream(first.artifact_dir + "/kernels.so").good());
  EXPECT_TRUE(std::ifstream(first.artifact_dir + "/manifest.json").good());
  CompileResult second = Build(CpuWs(src), "cpu", "b");
  EXPECT_TRUE(second.ok);
  EXPECT_TRUE(second.cache_hit);
  EXPECT_EQ(first.artifact_dir, second.artifact_dir);
}

// A cache hit answers with the warnings of the build that made the entry: the same source gets the
// same Compile text every time.
TEST_F(CompileStageTest, ACacheHitKeepsTheBuildsWarnings) {
  const std::string src = "#warning kernelrl-compile-test\nextern \"C\" int one() { return 1; }\n";
  CompileResult first = Build(CpuWs(src), "cpu", "w1");
  ASSERT_TRUE(first.ok) << first.summary << first.log;
  ASSERT_EQ(first.diagnostics.size(), 1u) << first.log;
  EXPECT_EQ(first.diagnostics[0].severity(), "warning");
  CompileResult second = Build(CpuWs(src), "cpu", "w2");
  ASSERT_TRUE(second.cache_hit);
  ASSERT_EQ(second.diagnostics.size(), 1u);
  EXPECT_EQ(second.diagnostics[0].SerializeAsString(), first.diagnostics[0].SerializeAsString());
}

TEST_F(CompileStageTest, ErrorsComeBackAsDiagnostics) {
  CompileResult r = Build(CpuWs("int f() {\n  return missing_name;\n}\n"), "cpu", "c");
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.failure, Verdict::COMPILE_ERROR);
  ASSERT_GE(r.diagnostics.size(), 1u) << r.log;
  EXPECT_EQ(r.diagnostics[0].file(), "kernels/k.cc");
  EXPECT_EQ(r.diagnostics[0].line(), 2);
  EXPECT_NE(r.diagnostics[0].message().find("missing_name"), std::string::npos);
  EXPECT_NE(r.summary.find("kernels/k.cc:2"), std::string::npos) << r.summary;
}

TEST_F(CompileStageTest, CompilerThatRunsForeverIsStopped) {
  // Template recursion that takes far longer than the 2 s limit.
  config_.mutable_compile()->set_wall_seconds(2);
  const std::string slow =
      "template <int N> struct F { static constexpr long v = F<N - 1>::v + F<N - 2>::v; };\n"
      "template <> struct F<0> { static constexpr long v = 0; };\n"
      "template <> struct F<1> { static constexpr long v = 1; };\n"
      "template <int N, int M> struct G { static constexpr long v = G<N - 1, M>::v + G<N, M - 1>::v; };\n"
      "template <int M> struct G<0, M> { static constexpr long v = 1; };\n"
      "template <int N> struct G<N, 0> { static constexpr long v = 1; };\n"
      "long x = G<900, 900>::v;\n";
  CompileResult r = Build(CpuWs(slow), "cpu", "d");
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.failure == Verdict::TIMEOUT || r.failure == Verdict::COMPILE_ERROR) << r.summary;
  EXPECT_LT(r.wall_ms, 20000);
}

TEST_F(CompileStageTest, NvccFastPathBuildsWhenInstalled) {
  if (access((config_.cuda_home() + "/bin/nvcc").c_str(), X_OK) != 0) GTEST_SKIP() << "nvcc not installed";
  Workspace ws;
  auto* f = ws.add_files();
  f->set_path("model_new.py");
  f->set_content("class ModelNew: pass\n");
  f = ws.add_files();
  f->set_path("kernels/k.cu");
  f->set_content("#include <cuda_runtime.h>\n__global__ void k(float* x) { x[threadIdx.x] = 1; }\n"
                 "extern \"C\" int launch(float* x) { k<<<1, 32>>>(x); return (int)cudaGetLastError(); }\n");
  CompileResult r = Build(ws, "cuda", "e");
  ASSERT_TRUE(r.ok) << r.summary << r.log;
  EXPECT_TRUE(std::ifstream(r.artifact_dir + "/kernels.so").good());
  std::printf("nvcc fast path compile: %.0f ms wall\n", r.wall_ms);
}

TEST(DiagnosticsTest, ParsesNvccGccAndPtxasFormats) {
  const std::string out =
      "/ws/kernels/a.cu(12): error: identifier \"foo\" is undefined\n"
      "/ws/kernels/b.cc:3:7: warning: unused variable 'x' [-Wunused-variable]\n"
      "ptxas error   : Entry function 'k' uses too much shared data\n"
      "random noise line\n";
  auto d = ParseDiagnostics(out, "/ws", 10, 30);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].file(), "kernels/a.cu");
  EXPECT_EQ(d[0].line(), 12);
  EXPECT_EQ(d[0].severity(), "error");
  EXPECT_EQ(d[1].column(), 7);
  EXPECT_EQ(d[1].severity(), "warning");
  EXPECT_LE(d[1].message().size(), 33u);  // truncated to 30 + "..."
  EXPECT_EQ(d[2].severity(), "error");
  EXPECT_EQ(ParseDiagnostics(out, "/ws", 1, 30).size(), 1u);
}

}  // namespace
}  // namespace kernelrl::sandbox
