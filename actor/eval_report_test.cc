// Table-1 arithmetic on random per-task results, checked against a direct
// recomputation in the test.
#include "actor/eval_report.h"

#include <cmath>
#include <random>

#include "absl/strings/match.h"
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

}  // namespace
}  // namespace kernelrl::actor
