#include "tools/cli/eval_schedule.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kernelrl::cli {
namespace {

// What the workers share. Each worker holds it as well as the caller, so that an abandoned worker
// never outlives it.
struct Shared {
  explicit Shared(const EvalSchedule& s)
      : schedule(s), results(s.task_ids.size()), complete(s.task_ids.size(), false),
        finished_rollouts(s.task_ids.size(), 0) {}

  bool Stopped() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return workers_running == 0; }
  bool PastLimit() const {
    return schedule.wall_limit_s > 0 && schedule.now() >= schedule.start + absl::Seconds(schedule.wall_limit_s);
  }

  const EvalSchedule schedule;  // A copy: the caller's may be gone while an abandoned worker runs.
  std::atomic<size_t> next{0};  // The next task to take.
  absl::Mutex mu;
  std::vector<actor::TaskResult> results ABSL_GUARDED_BY(mu);  // results[i] is valid once complete[i].
  std::vector<bool> complete ABSL_GUARDED_BY(mu);
  std::vector<int> finished_rollouts ABSL_GUARDED_BY(mu);
  int tasks_done ABSL_GUARDED_BY(mu) = 0;
  int workers_running ABSL_GUARDED_BY(mu) = 0;
};

void Work(std::shared_ptr<Shared> sh) {
  const EvalSchedule& s = sh->schedule;
  const int rollouts = std::max(1, s.rollouts_per_task);
  for (size_t i = sh->next++; i < s.task_ids.size(); i = sh->next++) {
    actor::TaskResult r;
    r.task_id = s.task_ids[i];
    int k = 0;
    for (; k < rollouts && !sh->PastLimit(); ++k) {
      s.rollout(i, k, &r);
      absl::MutexLock l(&sh->mu);
      ++sh->finished_rollouts[i];
    }
    if (k < rollouts) break;  // The limit: this task stays unfinished, and no other starts here.
    absl::MutexLock l(&sh->mu);
    sh->results[i] = std::move(r);
    sh->complete[i] = true;
    ++sh->tasks_done;
    if (s.on_task_done) s.on_task_done(sh->results[i], sh->tasks_done);
  }
  absl::MutexLock l(&sh->mu);
  --sh->workers_running;
}

}  // namespace

EvalRun RunEvalTasks(const EvalSchedule& schedule) {
  auto sh = std::make_shared<Shared>(schedule);
  const int workers = std::max(1, schedule.workers);
  {
    absl::MutexLock l(&sh->mu);
    sh->workers_running = workers;
  }
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) threads.emplace_back(Work, sh);

  EvalRun run;
  actor::EvalCut cut;
  cut.wall_limit_s = schedule.wall_limit_s;
  {
    absl::MutexLock l(&sh->mu);
    const absl::Condition stopped(sh.get(), &Shared::Stopped);
    // Wakes at least every 100 ms to read the schedule's clock (a test's steps its own).
    while (!sh->mu.AwaitWithTimeout(stopped, absl::Milliseconds(100)) && !sh->PastLimit()) {
    }
    const bool all_complete = std::all_of(sh->complete.begin(), sh->complete.end(), [](bool c) { return c; });
    // A worker still running with a task unfinished is inside a rollout; one running when every
    // task is complete is only on its way out, and is joined.
    run.abandoned = sh->workers_running > 0 && !all_complete;
    for (size_t i = 0; i < sh->results.size(); ++i) {
      if (sh->complete[i]) {
        run.results.push_back(std::move(sh->results[i]));  // No worker writes a complete task again.
      } else {
        cut.tasks_unfinished.push_back(schedule.task_ids[i]);
        cut.rollouts_unfinished += std::max(1, schedule.rollouts_per_task) - sh->finished_rollouts[i];
      }
    }
  }
  if (!cut.tasks_unfinished.empty()) run.cut = std::move(cut);
  for (std::thread& t : threads) {
    if (run.abandoned) {
      t.detach();
    } else {
      t.join();
    }
  }
  return run;
}

}  // namespace kernelrl::cli
