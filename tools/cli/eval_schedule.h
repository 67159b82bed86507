// RunEvalTasks: `kernelrl eval`'s tasks on a pool of worker threads, within an optional wall-clock
// limit.
//
// Each task's rollouts run in order on one worker, folded into that worker's own TaskResult, which
// is moved into the shared results under a mutex only when every rollout of the task has finished:
// a task is complete or absent, never half-filled. At the limit no new rollout starts. A rollout
// cannot be interrupted (RolloutRunner::Run blocks until the policy and the sandbox answer), so the
// call returns at the limit without waiting for the rollouts still running: the report is written
// from the tasks complete by then, and the workers still inside a rollout are abandoned (detached).
// They keep using whatever the rollout callback captured, so a caller whose run was `abandoned` must
// end the process without unwinding that state (std::_Exit after writing its files).
#ifndef KERNELRL_TOOLS_CLI_EVAL_SCHEDULE_H_
#define KERNELRL_TOOLS_CLI_EVAL_SCHEDULE_H_

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "actor/eval_report.h"

namespace kernelrl::cli {

struct EvalSchedule {
  std::vector<std::string> task_ids;  // One per task, in task order.
  int rollouts_per_task = 1;
  int workers = 1;
  // 0 = none. From `start`: no rollout starts at or after start + wall_limit_s.
  double wall_limit_s = 0;
  absl::Time start = absl::Now();
  std::function<absl::Time()> now = [] { return absl::Now(); };  // Tests step a clock of their own.
  // Task `task`'s rollout `k` folded into `r`: the worker's own, for that task's rollouts 0, 1, ...
  // in order, its task_id set. Called from the workers, several tasks at once.
  std::function<void(size_t task, int k, actor::TaskResult* r)> rollout;
  // After a task's result is in place, with the number of tasks complete (progress lines). Called
  // from the workers under the schedule's lock: one at a time, and it must not block.
  std::function<void(const actor::TaskResult& r, int tasks_done)> on_task_done;
};

struct EvalRun {
  std::vector<actor::TaskResult> results;  // The complete tasks, in task order.
  std::optional<actor::EvalCut> cut;       // Set when the limit left a task unfinished.
  // Some worker was still inside a rollout at the limit and was left running (see above).
  bool abandoned = false;
};

EvalRun RunEvalTasks(const EvalSchedule& schedule);

}  // namespace kernelrl::cli

#endif  // KERNELRL_TOOLS_CLI_EVAL_SCHEDULE_H_
