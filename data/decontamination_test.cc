// Decontamination and dedup on real KernelBench programs (KERNELRL_SHARED_DIR,
// default ../shared): a lightly edited copy of a KernelBench task is found
// above the 0.9 threshold and named; an unrelated synthesised task stays
// below it; the dedup hash ignores names and constants but not operators.
// Where KernelBench is absent (CI), the same checks run against a small
// corpus of our own KernelBench-format programs (data/testdata/own_corpus):
// the path is a parameter of decontamination, so the logic is the same.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_replace.h"
#include "data/ast_similarity.h"
#include "data/python_worker.h"
#include "gtest/gtest.h"

namespace kernelrl {
namespace {

namespace fs = std::filesystem;

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class DecontaminationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // KERNELRL_SHARED_DIR, else ../shared next to the checkout (found through a runfile's real path).
    const char* env = std::getenv("KERNELRL_SHARED_DIR");
    std::error_code ec;
    const fs::path repo = fs::canonical(fs::current_path() / "data" / "testdata" / "pass.py", ec)
                              .parent_path().parent_path().parent_path();
    kb_ = (env ? fs::path(env) : repo.parent_path() / "shared") / "kernelbench";
    if (!fs::exists(kb_ / "level2")) {
      std::printf("no KernelBench at %s: using data/testdata/own_corpus\n", kb_.string().c_str());
      kb_ = fs::current_path() / "data" / "testdata" / "own_corpus";
      own_corpus_ = true;
    }
    PythonWorker::Options o;
    o.harness_root = fs::current_path().string();
    worker_ = std::make_unique<PythonWorker>(o);
  }
  AstFingerprint PrintOf(const std::string& source, const std::string& name) {
    const fs::path p = fs::path(::testing::TempDir()) / (name + ".py");
    std::ofstream(p) << source;
    auto dump = RequestAst(*worker_, p.string(), 60);
    EXPECT_TRUE(dump.ok()) << dump.status();
    auto fp = Fingerprint(dump.ok() ? *dump : AstDump());
    EXPECT_TRUE(fp.ok()) << fp.status();
    return fp.ok() ? *fp : AstFingerprint();
  }
  fs::path kb_;
  bool own_corpus_ = false;
  std::unique_ptr<PythonWorker> worker_;
};

TEST_F(DecontaminationTest, LightlyEditedCopyIsCaughtUnrelatedTaskIsKept) {
  ReferenceSet refs;
  for (const char* level : {"level1", "level2"}) {
    for (const auto& e : fs::directory_iterator(kb_ / level)) {
      auto dump = RequestAst(*worker_, e.path().string(), 60);
      ASSERT_TRUE(dump.ok()) << dump.status();
      auto fp = Fingerprint(*dump);
      if (fp.ok()) refs.Add(std::string(level) + "/" + e.path().stem().string(), *fp);
    }
  }
  ASSERT_GT(refs.size(), own_corpus_ ? 3u : 150u);
  const std::string target = own_corpus_ ? "linear_scale_leaky" : "12_Gemm_Multiply_LeakyReLU";
  const std::string original = Read(kb_ / "level2" / (target + ".py"));
  // Renamed attributes and locals, other constants, a new docstring and comment.
  const std::string edited = absl::StrReplaceAll(
      original, {{"self.gemm", "self.fc"}, {"self.leaky_relu", "self.act"}, {"x = ", "h = "}, {"(x)", "(h)"},
                 {"x *", "h *"}, {"return x", "return h"}, {"8192", "4096"}, {"Simple model", "A model"},
                 {"def forward(self, x):", "def forward(self, h):  # edited copy"}});
  ASSERT_NE(edited, original);
  const Nearest copy = refs.Closest(PrintOf(edited, "edited"));
  EXPECT_GT(copy.similarity, 0.9);
  EXPECT_EQ(copy.name, "level2/" + target);

  const std::string unrelated = Read(fs::current_path() / "data" / "testdata" / "runtime_ok.py");
  const Nearest far = refs.Closest(PrintOf(unrelated, "unrelated"));
  EXPECT_LT(far.similarity, 0.9) << far.name;
  EXPECT_GT(far.similarity, 0.0);
}

TEST_F(DecontaminationTest, DedupHashIgnoresNamesAndConstantsNotOperators) {
  const std::string a = Read(fs::current_path() / "data" / "testdata" / "pass.py");
  const std::string renamed = absl::StrReplaceAll(a, {{"self.linear", "self.proj"}, {"64", "128"}});
  const std::string other_op = absl::StrReplaceAll(a, {{"F.gelu", "F.silu"}});
  const AstFingerprint fa = PrintOf(a, "a"), fr = PrintOf(renamed, "renamed"), fo = PrintOf(other_op, "other");
  EXPECT_EQ(fa.root, fr.root);
  EXPECT_DOUBLE_EQ(Similarity(fa, fr), 1.0);
  EXPECT_NE(fa.root, fo.root);
  EXPECT_LT(Similarity(fa, fo), 1.0);
  EXPECT_GT(Similarity(fa, fo), 0.8);  // One operator differs: only its path to the root changes.
}

}  // namespace
}  // namespace kernelrl
