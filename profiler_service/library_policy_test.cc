#include "profiler_service/library_policy.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace kernelrl {
namespace {

TEST(LibraryPolicyTest, GemmAndConvFromCode) {
  EXPECT_TRUE(DefaultLibraryPolicy("self.fc = nn.Linear(10, 20)").allow_cublas());
  EXPECT_TRUE(DefaultLibraryPolicy("return torch.matmul(A, B)").allow_cublas());
  EXPECT_TRUE(DefaultLibraryPolicy("return torch.bmm(a, b)").allow_cublas());
  EXPECT_TRUE(DefaultLibraryPolicy("return A @ B.T").allow_cublas());
  EXPECT_TRUE(DefaultLibraryPolicy("self.c = nn.ConvTranspose3d(3, 4, 3)").allow_cudnn());
  EXPECT_TRUE(DefaultLibraryPolicy("y = F.conv2d(x, w)").allow_cudnn());
  const LibraryPolicy relu = DefaultLibraryPolicy("def forward(self, x):\n    return torch.relu(x)\n");
  EXPECT_FALSE(relu.allow_cublas());
  EXPECT_FALSE(relu.allow_cudnn());
}

TEST(LibraryPolicyTest, CommentsAndStringsDoNotOpenALibrary) {
  const std::string source =
      "# like torch.matmul but elementwise\n"
      "class Model(nn.Module):\n"
      "    \"\"\"Not a matmul: torch.mm would be wrong here, and nn.Conv2d too.\"\"\"\n"
      "    def forward(self, x):\n"
      "        s = 'torch.bmm'  # nn.Linear\n"
      "        return x * 2\n";
  const LibraryPolicy p = DefaultLibraryPolicy(source);
  EXPECT_FALSE(p.allow_cublas());
  EXPECT_FALSE(p.allow_cudnn());
  // A decorator is not a matmul operator.
  EXPECT_FALSE(DefaultLibraryPolicy("@torch.no_grad()\ndef f(x):\n    return x\n").allow_cublas());
}

TEST(LibraryPolicyTest, ExplicitTaskPolicyWins) {
  Task task;
  task.set_reference_source("self.fc = nn.Linear(10, 20)");
  EXPECT_TRUE(EffectiveLibraryPolicy(task).allow_cublas());
  task.mutable_library_policy()->set_allow_cublas(false);  // present, explicitly forbidding
  EXPECT_FALSE(EffectiveLibraryPolicy(task).allow_cublas());
}

// On the real task set: every level-2 Gemm/Matmul task opens cuBLAS, every
// Conv task opens cuDNN, and elementwise level-1 tasks open neither.
TEST(LibraryPolicyTest, KernelBenchTasks) {
  const char* env = std::getenv("KERNELRL_SHARED_DIR");
  const std::filesystem::path shared = env ? env : "../shared";
  const std::filesystem::path level2 = shared / "kernelbench" / "level2";
  if (!std::filesystem::exists(level2)) GTEST_SKIP() << "no KernelBench at " << level2;
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(level2)) {
    const std::string name = entry.path().filename().string();
    std::ifstream in(entry.path());
    std::stringstream source;
    source << in.rdbuf();
    const LibraryPolicy p = DefaultLibraryPolicy(source.str());
    if (name.find("Gemm") != std::string::npos || name.find("Matmul") != std::string::npos) {
      EXPECT_TRUE(p.allow_cublas()) << name;
      ++checked;
    }
    if (name.find("Conv") != std::string::npos) {
      EXPECT_TRUE(p.allow_cudnn()) << name;
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
  for (const char* elementwise : {"19_ReLU.py", "21_Sigmoid.py", "88_MinGPTNewGelu.py", "23_Softmax.py"}) {
    std::ifstream in(shared / "kernelbench" / "level1" / elementwise);
    std::stringstream source;
    source << in.rdbuf();
    const LibraryPolicy p = DefaultLibraryPolicy(source.str());
    EXPECT_FALSE(p.allow_cublas() || p.allow_cudnn()) << elementwise;
  }
}

}  // namespace
}  // namespace kernelrl
