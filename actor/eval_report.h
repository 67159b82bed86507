// EvalReport: Table 1 of the CUDA Agent paper from per-task results.
//
// Per task the best verdict over all its rollouts and turns is scored
// (best-in-trajectory: the OK verdict with the highest speed-up over
// torch.compile). Per level and overall:
//   pass rate            correct solutions / tasks
//   faster than eager    correct and speedup_vs_eager > 1 (no 5% margin,
//   faster than compile  as in the paper's metric; the reward has the margin)
//   geomean speed-ups    over correct, profiled solutions only
// plus the outcome breakdown. Rendered as JSON and Markdown. The JSON also
// lists, per task, every rollout's final verdict (what the policy earned on
// that rollout, the RL reward): with several sampled rollouts per task their
// mean is the policy's expected reward, which best-of-rollouts overstates.
#ifndef KERNELRL_ACTOR_EVAL_REPORT_H_
#define KERNELRL_ACTOR_EVAL_REPORT_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "proto/verdict.pb.h"

namespace kernelrl::actor {

struct TaskResult {
  std::string task_id;
  int level = 0;
  v1::Verdict best;
  std::vector<v1::Verdict> finals;  // Per rollout, its trajectory's final verdict (reward -1 if it failed).
  int rollouts = 0;
  double wall_seconds = 0;
  int turns = 0;
  std::string stop_reason;
};

struct LevelSummary {
  std::string name;  // "level1", ..., "overall".
  int tasks = 0, passed = 0, faster_eager = 0, faster_compile = 0, profiled = 0;
  double geomean_eager = 0, geomean_compile = 0;  // 0 when nothing was profiled.
  std::map<std::string, int> outcomes;
  std::vector<double> speedups_eager, speedups_compile;  // Of correct, profiled solutions.
};

// An evaluation stopped at its wall-clock limit (kernelrl eval's wall_limit_s) before every task's
// rollouts finished. A task is scored on all its rollouts or not at all (best-of-k and the per-rollout
// mean of fewer rollouts would not compare), so the report holds only the finished tasks and this
// names the rest.
struct EvalCut {
  double wall_limit_s = 0;
  std::vector<std::string> tasks_unfinished;  // In task order.
  int rollouts_unfinished = 0;  // Of those tasks: abandoned while running, or never started.
};

std::vector<LevelSummary> Summarize(const std::vector<TaskResult>& results);
// With a cut, a top-level "cut": {"wall_limit_s", "tasks_unfinished": [ids], "rollouts_unfinished"};
// without, no "cut" key.
std::string ReportJson(const std::vector<TaskResult>& results, const std::vector<LevelSummary>& levels,
                       const std::optional<EvalCut>& cut = std::nullopt);
// The "cut" of `owner` (report.json's top level, or a curves.json evaluation that carries it):
// nullopt where it has none. Fields missing or of the wrong type read as zero / empty.
std::optional<EvalCut> EvalCutOf(const Json& owner);
// With a cut, a line above Table 1 says so.
std::string ReportMarkdown(const std::vector<TaskResult>& results, const std::vector<LevelSummary>& levels,
                           const std::optional<EvalCut>& cut = std::nullopt);

}  // namespace kernelrl::actor

#endif  // KERNELRL_ACTOR_EVAL_REPORT_H_
