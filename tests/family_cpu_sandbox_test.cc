// The CPU templates through the real sandbox (CPU backend: compile, isolated
// verify on the five input sets): fp32 choices are correct, also on odd shapes
// and K not a multiple of the tile; fp16 choices of these fp32 tasks are wrong
// answers under the strict precision policy (error against the fp64 reference
// beyond the fp32 reference's own), even where the chain saturates first.
#include <memory>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "data/family/family.h"
#include "gtest/gtest.h"
#include "sandbox/tests/e2e_util.h"

namespace kernelrl::data::family {
namespace {

using agent::family::Choice;
using agent::family::kNumSlots;
using agent::family::Render;

class FamilyCpuSandboxTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    python_ = new std::string(sandbox::testing::FindTorchPython());
    if (python_->empty()) return;
    auto e = sandbox::Evaluator::Create(sandbox::testing::CpuConfig(*python_));
    ASSERT_TRUE(e.ok()) << e.status();
    evaluator_ = e->release();
  }
  static void TearDownTestSuite() {
    delete evaluator_;
    evaluator_ = nullptr;
  }
  void SetUp() override {
    if (python_->empty()) GTEST_SKIP() << "no python3 with torch on this machine";
  }

  static v1::Verdict Evaluate(const FamilyTask& t, const std::string& digits) {
    Choice c{};
    for (int i = 0; i < kNumSlots; ++i) c[i] = digits[i] - '0';
    auto files = Render(t.spec, c, "cpu");
    EXPECT_TRUE(files.ok()) << files.status();
    v1::EvaluateRequest req;
    req.mutable_task()->set_id(t.id);
    req.mutable_task()->set_reference_source(t.source);
    req.mutable_task()->mutable_inputs()->set_device("cpu");
    req.mutable_task()->mutable_inputs()->set_dtype("float32");
    for (const auto& [path, content] : *files) {
      v1::WorkspaceFile* f = req.mutable_workspace()->add_files();
      f->set_path(path);
      f->set_content(content);
    }
    req.set_request_id(t.id + "/" + digits);
    return evaluator_->Evaluate(req);
  }
  static v1::Verdict Evaluate(const std::string& task_id, const std::string& digits) {
    for (const FamilyTask& t : MakeTasks("cpu")) {
      if (t.id == task_id) return Evaluate(t, digits);
    }
    ADD_FAILURE() << "no task " << task_id;
    return v1::Verdict();
  }

  static std::string* python_;
  static sandbox::Evaluator* evaluator_;
};
std::string* FamilyCpuSandboxTest::python_ = nullptr;
sandbox::Evaluator* FamilyCpuSandboxTest::evaluator_ = nullptr;

struct Case {
  const char* task;
  const char* choice;
  v1::Verdict::Outcome outcome;
  const char* summary_has;
};

// The corpus teaches the engineer's kernels for compositions no job runs (MakeReadingTasks):
// the templates must render them right too, a pointwise op of any family in each family.
TEST_F(FamilyCpuSandboxTest, ReadingCompositionsAreRightInFp32) {
  std::set<std::string> families;
  for (const FamilyTask& t : MakeReadingTasks("cpu", 3, 1)) {
    if (!families.insert(t.spec.family).second) continue;
    const v1::Verdict v = Evaluate(t, "1100");
    EXPECT_EQ(v.outcome(), v1::Verdict::OK) << t.id << ": " << v.summary();
  }
  EXPECT_EQ(families.size(), 3u);
}

TEST_F(FamilyCpuSandboxTest, ChoicesGetTheirVerdicts) {
  const Case cases[] = {
      // 32x127: vec=4 leaves a 3-element tail per call.
      {"train/ew_clamp-silu-scale_32x127", "2110", v1::Verdict::OK, ""},
      {"train/ew_relu-scale_32x127", "0021", v1::Verdict::WRONG_ANSWER, "precision (strict)"},
      // A chain that saturates first (clamp) survives overflow (inf clamps to 1),
      // not the strict precision bound.
      {"train/ew_clamp-silu-scale_32x127", "1201", v1::Verdict::WRONG_ANSWER, "precision (strict)"},
      {"train/rr_softmax_64x128", "1110", v1::Verdict::OK, ""},
      {"train/rr_softmax_64x128", "2001", v1::Verdict::WRONG_ANSWER, "precision (strict)"},
      {"heldout/rr_log_softmax-scale_64x128", "0200", v1::Verdict::OK, ""},
      {"train/rr_layernorm-tanh_32x256", "1010", v1::Verdict::OK, ""},
      {"train/rr_rmsnorm_64x128", "1111", v1::Verdict::WRONG_ANSWER, ""},
      {"train/ge_relu_32x64x64", "0010", v1::Verdict::OK, ""},
      // K = 100: the last tile is partial.
      {"heldout/ge_relu_16x100x64", "1110", v1::Verdict::OK, ""},
      {"train/ge_relu_32x64x64", "2101", v1::Verdict::WRONG_ANSWER, "precision (strict)"},
  };
  for (const Case& c : cases) {
    const v1::Verdict v = Evaluate(c.task, c.choice);
    EXPECT_EQ(v1::Verdict::Outcome_Name(v.outcome()), v1::Verdict::Outcome_Name(c.outcome))
        << c.task << " choice " << c.choice << ": " << v.summary();
    EXPECT_TRUE(absl::StrContains(v.summary(), c.summary_has)) << c.task << " " << c.choice << ": " << v.summary();
    std::printf("%-40s %s  %-13s %s\n", c.task, c.choice, v1::Verdict::Outcome_Name(v.outcome()).c_str(),
                v.summary().substr(0, 150).c_str());
  }
}

}  // namespace
}  // namespace kernelrl::data::family
