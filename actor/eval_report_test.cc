// Table-1 arithmetic on random per-task results, checked against a direct
// recomputation in the test.
#include "actor/eval_report.h"

#include <cmath>
#include <random>

#include "absl/strings/match.h"
#include "common/json.h"
#include "gtest/gtest.h"

namespace kernelrl::actor {
namespace {

TEST(EvalReportTest, RatesAndGeomeansPerLevel) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> speed(0.3, 4.0);
  std::vector<TaskResult> results;
  int l1 = 0, pass1 = 0, fe1 = 0, fc1 = 0;
  double log_e1 = 0, log_c1 = 0;
  for (int i = 0; i < 60; ++i) {
    TaskResult r;
    r.level = 1 + static_cast<int>(rng() % 2);
    r.task_id = "level" + std::to_string(r.level) + "/t" + std::to_string(i);
    const int kind = static_cast<int>(rng() % 3);
    r.best.set_outcome(kind == 0 ? v1::Verdict::WRONG_ANSWER : v1::Verdict::OK);
    if (kind == 2) {
      r.best.set_speedup_vs_eager(speed(rng));
      r.best.set_speedup_vs_compile(speed(rng));
    }
    if (r.level == 1) {
      ++l1;
      if (kind != 0) ++pass1;
      if (kind == 2) {
        fe1 += r.best.speedup_vs_eager() > 1;
        fc1 += r.best.speedup_vs_compile() > 1;
        log_e1 += std::log(r.best.speedup_vs_eager());
        log_c1 += std::log(r.best.speedup_vs_compile());
      }
    }
    results.push_back(r);
  }
  std::vector<LevelSummary> s = Summarize(results);
  ASSERT_EQ(s.back().name, "overall");
  EXPECT_EQ(s.back().tasks, 60);
  const LevelSummary& a = s[0];
  ASSERT_EQ(a.name, "level1");
  EXPECT_EQ(a.tasks, l1);
  EXPECT_EQ(a.passed, pass1);
  EXPECT_EQ(a.faster_eager, fe1);
  EXPECT_EQ(a.faster_compile, fc1);
  const int prof = static_cast<int>(a.speedups_eager.size());
  ASSERT_GT(prof, 0);
  EXPECT_NEAR(a.geomean_eager, std::exp(log_e1 / prof), 1e-9);
  EXPECT_NEAR(a.geomean_compile, std::exp(log_c1 / prof), 1e-9);
  EXPECT_EQ(a.outcomes.at("WRONG_ANSWER") + a.outcomes.at("OK"), l1);
  const std::string md = ReportMarkdown(results, s);
  EXPECT_TRUE(absl::StrContains(md, "| level1 | " + std::to_string(l1) + " | ")) << md;
  EXPECT_TRUE(absl::StrContains(ReportJson(results, s), "\"faster_than_compile_rate\""));
}

// An evaluation stopped at its limit says so at the top of report.json, naming the tasks left out;
// one that finished has no "cut" key at all (readers tell them apart by its presence).
TEST(EvalReportTest, ACutIsRecordedAndOnlyWhenThereIsOne) {
  TaskResult done;
  done.task_id = "level1/1_a";
  done.level = 1;
  done.rollouts = 2;
  done.best.set_outcome(v1::Verdict::OK);
  const std::vector<TaskResult> results = {done};
  const std::vector<LevelSummary> s = Summarize(results);

  auto whole = ParseJson(ReportJson(results, s));
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(FindJson(*whole, "cut"), nullptr);
  EXPECT_EQ(ReportJson(results, s), ReportJson(results, s, std::nullopt));
  EXPECT_FALSE(absl::StrContains(ReportMarkdown(results, s), "Cut at"));

  const EvalCut cut{90, {"level1/2_b", "level1/3_c"}, 3};
  auto cut_json = ParseJson(ReportJson(results, s, cut));
  ASSERT_TRUE(cut_json.ok()) << cut_json.status();
  const Json* c = FindJson(*cut_json, "cut");
  ASSERT_NE(c, nullptr);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*c, "wall_limit_s")), 90);
  EXPECT_EQ(*FindJson(*c, "tasks_unfinished"), Json::array({Json("level1/2_b"), Json("level1/3_c")}));
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*c, "rollouts_unfinished")), 3);
  // EvalCutOf reads back what ReportJson wrote, and nothing from a report without a cut.
  const std::optional<EvalCut> read = EvalCutOf(*cut_json);
  ASSERT_TRUE(read.has_value());
  EXPECT_DOUBLE_EQ(read->wall_limit_s, 90);
  EXPECT_EQ(read->tasks_unfinished, cut.tasks_unfinished);
  EXPECT_EQ(read->rollouts_unfinished, 3);
  EXPECT_FALSE(EvalCutOf(*whole).has_value());
  // The tasks and levels are those of the finished tasks alone.
  EXPECT_EQ(FindJson(*cut_json, "tasks")->size(), 1u);
  EXPECT_EQ(*FindJson(*cut_json, "tasks"), *FindJson(*whole, "tasks"));
  EXPECT_EQ(*FindJson(*cut_json, "levels"), *FindJson(*whole, "levels"));
  EXPECT_TRUE(absl::StartsWith(ReportMarkdown(results, s, cut),
                               "Cut at the 90 s limit: 1 tasks scored, 2 unfinished (3 rollouts) left out.\n\n| Subset"))
      << ReportMarkdown(results, s, cut);
}

}  // namespace
}  // namespace kernelrl::actor
