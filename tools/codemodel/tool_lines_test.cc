// Tool-line shapes: the corpus's, and a run's lines that it never showed.
#include "tools/codemodel/tool_lines.h"

#include <random>

#include "agent/policy/engineer_policy.h"
#include "common/testing/testing.h"
#include "gtest/gtest.h"
#include "tools/codemodel/corpus.h"
#include "tools/codemodel/test_tasks.h"

namespace kernelrl::codemodel {
namespace {

// What the H200's sandbox answered a Profile with (2026-12-01, a held-out ReLU GEMM), less its
// flags line (the corpus draws those at random).
constexpr char kH200Profile[] =
    "Profile: OK: correct on 5 input sets (task, normal, task, uniform_pm1, large_magnitude); "
    "profile: 230.3 us; 0.30x eager, 0.30x compile\n"
    "speed-up vs eager 0.296x, vs torch.compile 0.300x (graph-replayed: candidate 204.07 us, "
    "eager 60.41 us, torch.compile 61.19 us)\n"
    "GPU time: own kernels 100%, library 0%, other 0%\n"
    "reward 1\n";

v1::Trajectory WithToolTurn(const std::string& tool, const std::string& content) {
  v1::Trajectory t;
  v1::Turn* turn = t.add_turns();
  turn->set_role(v1::Turn::TOOL);
  turn->set_tool_name(tool);
  turn->set_content(content);
  return t;
}

TEST(ToolLinesTest, AShapeSetsNumbersAside) {
  EXPECT_EQ(ToolLineShape("reward 2"), ToolLineShape("reward 1"));
  EXPECT_EQ(ToolLineShape("profile: 230.3 us; 0.30x eager"), "profile: N us; Nx eager");
  EXPECT_NE(ToolLineShape("speed-up vs eager 0.296x, vs torch.compile 0.300x"),
            ToolLineShape("speed-up vs eager 0.296x, vs torch.compile 0.300x (graph-replayed: candidate 204.07 us)"));
}

TEST(ToolLinesTest, TheCorpusShowsEveryLineOfTheSandboxsProfileAndARunCountsWhatItDidNot) {
  agent::EngineerPolicyOptions eo;
  eo.device = "cuda";
  auto corpus = MakeCorpus(testing::FirstTrainingTaskPerFamily("cuda"), 2, v1::RolloutConfig(), "", eo,
                           std::random_device{}(), kernelrl::testing::NewTempDir("tool_lines_ws"));
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  const std::set<std::string> shapes = CorpusToolLineShapes(corpus->records);
  const std::string path = kernelrl::testing::NewTempDir("tool_lines") + "/" + kToolLineShapesFile;
  ASSERT_TRUE(WriteToolLineShapes(shapes, path).ok());
  auto read = ReadToolLineShapes(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, shapes);

  std::map<std::string, ToolLineCount> by_tool;
  CountToolLines(WithToolTurn("Profile", kH200Profile), *read, &by_tool);
  EXPECT_EQ(by_tool["Profile"].lines, 4);
  EXPECT_EQ(by_tool["Profile"].unseen, 0) << ToolLineCountsJson(by_tool, 5).dump();

  // The speed-up line as the corpus wrote it before it showed the figures: never in this corpus.
  CountToolLines(WithToolTurn("Profile", "speed-up vs eager 0.296x, vs torch.compile 0.300x\nreward 1\n"), *read,
                 &by_tool);
  EXPECT_EQ(by_tool["Profile"].lines, 6);
  EXPECT_EQ(by_tool["Profile"].unseen, 1);
  const Json counts = ToolLineCountsJson(by_tool, 5);
  ASSERT_EQ(counts["Profile"]["shapes"].size(), 1u);
  EXPECT_EQ(counts["Profile"]["shapes"][0]["shape"], "speed-up vs eager Nx, vs torch.compile Nx");
  EXPECT_EQ(counts["Profile"]["shapes"][0]["count"], 1);
}

}  // namespace
}  // namespace kernelrl::codemodel
