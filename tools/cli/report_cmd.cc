#include "tools/cli/report_cmd.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/json.h"
#include "common/text.h"
#include "proto/cli_config.pb.h"
#include "tools/cli/command_line.h"
#include "tools/cli/local_cluster.h"

namespace kernelrl::cli {
namespace {

constexpr char kDefaults[] = R"pb(
  python: "python3"
  plot_script: "tools/cli/eval_plots.py"
)pb";

absl::StatusOr<v1::Verdict> VerdictFromJson(const Json& j) {
  v1::Verdict v;
  auto outcome = GetJsonString(j, "outcome", "OUTCOME_UNSPECIFIED");
  if (!outcome.ok()) return outcome.status();
  v1::Verdict::Outcome o;
  if (!v1::Verdict::Outcome_Parse(*outcome, &o)) return absl::InvalidArgumentError("unknown outcome " + *outcome);
  v.set_outcome(o);
  for (auto [key, set] : std::initializer_list<std::pair<const char*, void (v1::Verdict::*)(double)>>{
           {"speedup_vs_eager", &v1::Verdict::set_speedup_vs_eager},
           {"speedup_vs_compile", &v1::Verdict::set_speedup_vs_compile}}) {
    auto x = GetJsonDouble(j, key, 0);
    if (!x.ok()) return x.status();
    (v.*set)(*x);
  }
  auto reward = GetJsonDouble(j, "reward", 0);
  if (!reward.ok()) return reward.status();
  v.set_reward(*reward);
  auto summary = GetJsonString(j, "summary", "");
  if (!summary.ok()) return summary.status();
  v.set_summary(*summary);
  return v;
}

}  // namespace

absl::StatusOr<std::vector<actor::TaskResult>> ResultsFromReportJson(const Json& root) {
  const Json* tasks = FindJson(root, "tasks");
  if (tasks == nullptr || !tasks->is_array()) return absl::InvalidArgumentError("no \"tasks\" array");
  std::vector<actor::TaskResult> out;
  for (const Json& t : *tasks) {
    actor::TaskResult r;
    auto id = GetJsonString(t, "task_id", "");
    auto level = GetJsonInt(t, "level", 0);
    auto rollouts = GetJsonInt(t, "rollouts", 0);
    auto turns = GetJsonInt(t, "turns", 0);
    auto stop = GetJsonString(t, "stop_reason", "");
    auto wall = GetJsonDouble(t, "wall_seconds", 0);
    auto best = VerdictFromJson(t);
    for (const absl::Status& s : {id.status(), level.status(), rollouts.status(), turns.status(), stop.status(),
                                  wall.status(), best.status()}) {
      if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("task ", out.size(), ": ", s.message()));
    }
    r.task_id = *id;
    r.level = static_cast<int>(*level);
    r.rollouts = static_cast<int>(*rollouts);
    r.turns = static_cast<int>(*turns);
    r.stop_reason = *stop;
    r.wall_seconds = *wall;
    r.best = *best;
    if (const Json* finals = FindJson(t, "rollout_finals"); finals != nullptr) {
      for (const Json& f : *finals) {
        auto v = VerdictFromJson(f);
        if (!v.ok()) return v.status();
        r.finals.push_back(*v);
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

int ReportMain(int argc, char** argv) {
  v1::ReportConfig config;
  CommandLine cl("report", "Re-render an evaluation's Table 1 (report.md) and plots from DIR/report.json.", &config);
  cl.Flag("dir", "dir", "kernelrl eval's output directory (holds report.json)");
  cl.Flag("--plot_script", "plot_script", "Plots from report.json (\"\" = none)");
  cl.Flag("--python", "python", "Runs the plot script (matplotlib)");
  if (std::optional<int> code = cl.Parse(argc, argv, kDefaults)) return *code;
  if (config.dir().empty()) return cl.Fail("which directory? kernelrl report DIR");
  const std::string json_path = config.dir() + "/report.json";
  auto text = ReadFileToString(json_path);
  if (!text.ok()) return cl.Fail(std::string(text.status().message())), 1;
  auto root = ParseJson(*text);
  if (!root.ok()) return cl.Fail(json_path + ": " + std::string(root.status().message())), 1;
  auto results = ResultsFromReportJson(*root);
  if (!results.ok()) return cl.Fail(json_path + ": " + std::string(results.status().message())), 1;
  const std::string md = actor::ReportMarkdown(*results, actor::Summarize(*results), actor::EvalCutOf(*root));
  if (absl::Status s = WriteFileAtomically(config.dir() + "/report.md", md); !s.ok()) {
    return cl.Fail(std::string(s.message())), 1;
  }
  std::fputs(md.c_str(), stdout);
  std::string plots = config.plot_script();
  if (!plots.empty() && plots[0] != '/' && access(plots.c_str(), R_OK) != 0) plots = SelfExe() + ".runfiles/kernelrl/" + plots;
  if (!config.plot_script().empty()) {
    const std::string cmd = absl::StrCat(ShellQuote(config.python()), " ", ShellQuote(plots), " ", ShellQuote(json_path),
                                         " ", ShellQuote(config.dir()));
    if (std::system(cmd.c_str()) != 0) return cl.Fail("plots failed: " + cmd), 1;
    std::fprintf(stderr, "kernelrl report: %s/report.md, %s/speedups.png, %s/outcomes.png\n", config.dir().c_str(),
                 config.dir().c_str(), config.dir().c_str());
  }
  return 0;
}

}  // namespace kernelrl::cli
