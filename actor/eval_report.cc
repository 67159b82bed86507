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

std::string ReportJson(const std::vector<TaskResult>& results, const std::vector<LevelSummary>& levels,
                       const std::optional<EvalCut>& cut) {
  Json root = Json::object();
  Json lv = Json::array();
  for (const LevelSummary& l : levels) {
    Json outcomes = Json::object();
    for (const auto& [k, n] : l.outcomes) outcomes[k] = Json(n);
    Json se = Json::array(), sc = Json::array();
    for (double x : l.speedups_eager) se.push_back(Json(x));
    for (double x : l.speedups_compile) sc.push_back(Json(x));
    lv.push_back(Json::object({{"level", Json(l.name)},
                          {"tasks", Json(l.tasks)},
                          {"pass_rate", Json(l.tasks ? 1.0 * l.passed / l.tasks : 0)},
                          {"faster_than_eager_rate", Json(l.tasks ? 1.0 * l.faster_eager / l.tasks : 0)},
                          {"faster_than_compile_rate", Json(l.tasks ? 1.0 * l.faster_compile / l.tasks : 0)},
                          {"geomean_speedup_vs_eager", Json(l.geomean_eager)},
                          {"geomean_speedup_vs_compile", Json(l.geomean_compile)},
                          {"profiled", Json(l.profiled)},
                          {"outcomes", std::move(outcomes)},
                          {"speedups_vs_eager", std::move(se)},
                          {"speedups_vs_compile", std::move(sc)}}));
  }
  root["levels"] = std::move(lv);
  Json tasks = Json::array();
  for (const TaskResult& r : results) {
    Json finals = Json::array();
    for (const v1::Verdict& v : r.finals) {
      // The baselines' medians it was judged against (0: none): which baselines a report is of.
      finals.push_back(Json::object({{"outcome", Json(v1::Verdict::Outcome_Name(v.outcome()))},
                                {"reward", Json(v.reward())},
                                {"speedup_vs_eager", Json(v.speedup_vs_eager())},
                                {"speedup_vs_compile", Json(v.speedup_vs_compile())},
                                {"eager_time_us", Json(v.eager_time_us())},
                                {"compile_time_us", Json(v.compile_time_us())}}));
    }
    tasks.push_back(Json::object({{"task_id", Json(r.task_id)},
                             {"level", Json(r.level)},
                             {"outcome", Json(v1::Verdict::Outcome_Name(r.best.outcome()))},
                             {"summary", Json(r.best.summary())},
                             {"speedup_vs_eager", Json(r.best.speedup_vs_eager())},
                             {"speedup_vs_compile", Json(r.best.speedup_vs_compile())},
                             {"reward", Json(r.best.reward())},
                             {"rollouts", Json(r.rollouts)},
                             {"rollout_finals", std::move(finals)},
                             {"turns", Json(r.turns)},
                             {"stop_reason", Json(r.stop_reason)},
                             {"wall_seconds", Json(r.wall_seconds)}}));
  }
  root["tasks"] = std::move(tasks);
  if (cut.has_value()) {
    Json ids = Json::array();
    for (const std::string& id : cut->tasks_unfinished) ids.push_back(Json(id));
    root["cut"] = Json::object({{"wall_limit_s", Json(cut->wall_limit_s)},
                                {"tasks_unfinished", std::move(ids)},
                                {"rollouts_unfinished", Json(cut->rollouts_unfinished)}});
  }
  return DumpJson(root, 2) + "\n";
}

std::optional<EvalCut> EvalCutOf(const Json& owner) {
  const Json* cut = owner.is_object() ? FindJson(owner, "cut") : nullptr;
  if (cut == nullptr || !cut->is_object()) return std::nullopt;
  EvalCut c;
  if (const Json* limit = FindJson(*cut, "wall_limit_s"); limit != nullptr && limit->is_number()) {
    c.wall_limit_s = JsonNumber(*limit);
  }
  if (const Json* left = FindJson(*cut, "rollouts_unfinished"); left != nullptr && left->is_number()) {
    c.rollouts_unfinished = static_cast<int>(JsonNumber(*left));
  }
  if (const Json* ids = FindJson(*cut, "tasks_unfinished"); ids != nullptr && ids->is_array()) {
    for (const Json& id : *ids) {
      if (id.is_string()) c.tasks_unfinished.push_back(id.get<std::string>());
    }
  }
  return c;
}

std::string ReportMarkdown(const std::vector<TaskResult>& results, const std::vector<LevelSummary>& levels,
                           const std::optional<EvalCut>& cut) {
  std::string md;
  if (cut.has_value()) {
    absl::StrAppendFormat(&md, "Cut at the %g s limit: %d tasks scored, %d unfinished (%d rollouts) left out.\n\n",
                          cut->wall_limit_s, static_cast<int>(results.size()),
                          static_cast<int>(cut->tasks_unfinished.size()), cut->rollouts_unfinished);
  }
  md +=
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
