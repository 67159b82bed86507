#include "actor/eval_report.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json.h"

namespace kernelrl::actor {
namespace {

double Geomean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += std::log(x);
  return std::exp(s / static_cast<double>(v.size()));
}

void Add(LevelSummary* l, const TaskResult& r) {
  const v1::Verdict& v = r.best;
  ++l->tasks;
  ++l->outcomes[v1::Verdict::Outcome_Name(v.outcome())];
  if (v.outcome() != v1::Verdict::OK) return;
  ++l->passed;
  if (v.speedup_vs_eager() > 1) ++l->faster_eager;
  if (v.speedup_vs_compile() > 1) ++l->faster_compile;
  if (v.speedup_vs_eager() > 0 && v.speedup_vs_compile() > 0) {
    ++l->profiled;
    l->speedups_eager.push_back(v.speedup_vs_eager());
    l->speedups_compile.push_back(v.speedup_vs_compile());
  }
}

std::string Pct(int n, int d) { return d == 0 ? "-" : absl::StrFormat("%.1f%%", 100.0 * n / d); }
std::string X(double g) { return g == 0 ? "-" : absl::StrFormat("%.2fx", g); }

}  // namespace

std::vector<LevelSummary> Summarize(const std::vector<TaskResult>& results) {
  std::map<int, LevelSummary> by_level;
  LevelSummary overall;
  overall.name = "overall";
  for (const TaskResult& r : results) {
    LevelSummary& l = by_level[r.level];
    l.name = r.level > 0 ? absl::StrCat("level", r.level) : "other";
    Add(&l, r);
    Add(&overall, r);
  }
  std::vector<LevelSummary> out;
  for (auto& [level, l] : by_level) out.push_back(l);
  out.push_back(overall);
  for (LevelSummary& l : out) {
    l.geomean_eager = Geomean(l.speedups_eager);
    l.geomean_compile = Geomean(l.speedups_compile);
  }
  return out;
}

std::string ReportJson(const std::vector<TaskResult>& results, const std::vector<LevelSummary>& levels) {
  Json root = Json::Object();
  Json lv = Json::Array();
  for (const LevelSummary& l : levels) {
    Json outcomes = Json::Object();
    for (const auto& [k, n] : l.outcomes) outcomes.Set(k, Json::Int(n));
    Json se = Json::Array(), sc = Json::Array();
    for (double x : l.speedups_eager) se.Push(Json::Number(x));
    for (double x : l.speedups_compile) sc.Push(Json::Number(x));
    lv.Push(Json::Object({{"level", Json::String(l.name)},
                          {"tasks", Json::Int(l.tasks)},
                          {"pass_rate", Json::Number(l.tasks ? 1.0 * l.passed / l.tasks : 0)},
                          {"faster_than_eager_rate", Json::Number(l.tasks ? 1.0 * l.faster_eager / l.tasks : 0)},
                          {"faster_than_compile_rate", Json::Number(l.tasks ? 1.0 * l.faster_compile / l.tasks : 0)},
                          {"geomean_speedup_vs_eager", Json::Number(l.geomean_eager)},
                          {"geomean_speedup_vs_compile", Json::Number(l.geomean_compile)},
                          {"profiled", Json::Int(l.profiled)},
                          {"outcomes", std::move(outcomes)},
                          {"speedups_vs_eager", std::move(se)},
                          {"speedups_vs_compile", std::move(sc)}}));
  }
  root.Set("levels", std::move(lv));
  Json tasks = Json::Array();
  for (const TaskResult& r : results) {
    Json finals = Json::Array();
    for (const v1::Verdict& v : r.finals) {
      finals.Push(Json::Object({{"outcome", Json::String(v1::Verdict::Outcome_Name(v.outcome()))},
                                {"reward", Json::Number(v.reward())},
                                {"speedup_vs_eager", Json::Number(v.speedup_vs_eager())},
                                {"speedup_vs_compile", Json::Number(v.speedup_vs_compile())}}));
    }
    tasks.Push(Json::Object({{"task_id", Json::String(r.task_id)},
                             {"level", Json::Int(r.level)},
                             {"outcome", Json::String(v1::Verdict::Outcome_Name(r.best.outcome()))},
                             {"summary", Json::String(r.best.summary())},
                             {"speedup_vs_eager", Json::Number(r.best.speedup_vs_eager())},
                             {"speedup_vs_compile", Json::Number(r.best.speedup_vs_compile())},
                             {"reward", Json::Number(r.best.reward())},
                             {"rollouts", Json::Int(r.rollouts)},
                             {"rollout_finals", std::move(finals)},
                             {"turns", Json::Int(r.turns)},
                             {"stop_reason", Json::String(r.stop_reason)},
                             {"wall_seconds", Json::Number(r.wall_seconds)}}));
  }
  root.Set("tasks", std::move(tasks));
  return root.Dump(2) + "\n";
}

std::string ReportMarkdown(const std::vector<TaskResult>& results, const std::vector<LevelSummary>& levels) {
  std::string md =
      "| Subset | Tasks | Pass | Faster vs Eager | Faster vs Compile | GM speed-up vs Eager | GM speed-up vs Compile |\n"
      "|---|---|---|---|---|---|---|\n";
  for (const LevelSummary& l : levels) {
    absl::StrAppend(&md, "| ", l.name, " | ", l.tasks, " | ", Pct(l.passed, l.tasks), " | ", Pct(l.faster_eager, l.tasks),
                    " | ", Pct(l.faster_compile, l.tasks), " | ", X(l.geomean_eager), " | ", X(l.geomean_compile), " |\n");
  }
  absl::StrAppend(&md, "\n| Task | Outcome | vs Eager | vs Compile | Reward | Turns | Stop |\n|---|---|---|---|---|---|---|\n");
  for (const TaskResult& r : results) {
    absl::StrAppend(&md, "| ", r.task_id, " | ", v1::Verdict::Outcome_Name(r.best.outcome()), " | ",
                    X(r.best.speedup_vs_eager()), " | ", X(r.best.speedup_vs_compile()), " | ", r.best.reward(), " | ",
                    r.turns, " | ", r.stop_reason, " |\n");
  }
  return md;
}

}  // namespace kernelrl::actor
