// RunEvalTasks without a limit (every task, joined, no cut) and at one (the complete tasks alone, the
// unfinished ones named, a worker stuck in a rollout left behind). The limit is crossed by stepping
// the schedule's own clock when the test's events have happened, never by waiting on the real one.
#include "tools/cli/eval_schedule.h"

#include <atomic>
#include <memory>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace kernelrl::cli {
namespace {

std::vector<std::string> Ids(const std::vector<actor::TaskResult>& results) {
  std::vector<std::string> ids;
  for (const actor::TaskResult& r : results) ids.push_back(r.task_id);
  return ids;
}

TEST(RunEvalTasksTest, WithoutALimitEveryTaskIsScoredInOrderAndNothingIsCut) {
  EvalSchedule s;
  s.task_ids = {"a", "b", "c", "d", "e"};
  s.rollouts_per_task = 3;
  s.workers = 3;
  s.rollout = [](size_t task, int k, actor::TaskResult* r) {
    EXPECT_EQ(r->rollouts, k);  // A task's rollouts in order, on one result.
    ++r->rollouts;
    r->level = static_cast<int>(task);
  };
  std::atomic<int> done{0};
  s.on_task_done = [&done](const actor::TaskResult& r, int n) {
    EXPECT_EQ(r.rollouts, 3);
    done = n;
  };
  const EvalRun run = RunEvalTasks(s);
  EXPECT_FALSE(run.abandoned);
  EXPECT_FALSE(run.cut.has_value());
  EXPECT_EQ(Ids(run.results), s.task_ids);
  for (size_t i = 0; i < run.results.size(); ++i) EXPECT_EQ(run.results[i].level, static_cast<int>(i));
  EXPECT_EQ(done, 5);
}

// Four tasks, two workers, one rollout each: task b's rollout blocks until the test lets it go; a
// ends at once and c once b is inside its rollout, and when the second of them is in place the clock
// steps past the limit. So b is abandoned in its rollout and d never starts, whichever worker took
// which task. (Without c waiting for b, a worker that took b but had not yet started it could see
// the limit first and leave b unstarted: nothing abandoned, and b never ends.)
TEST(RunEvalTasksTest, AtTheLimitOnlyCompleteTasksAreScoredAndTheRestAreNamed) {
  struct Events {
    std::atomic<int64_t> clock_s{0};
    absl::Notification b_started, release_b, b_done;
  };
  auto ev = std::make_shared<Events>();  // Outlives the abandoned worker's last use of it.
  EvalSchedule s;
  s.task_ids = {"a", "b", "c", "d"};
  s.workers = 2;
  s.wall_limit_s = 60;
  s.start = absl::UnixEpoch();
  s.now = [ev] { return absl::UnixEpoch() + absl::Seconds(ev->clock_s.load()); };
  s.rollout = [ev](size_t task, int, actor::TaskResult* r) {
    if (task == 1) {
      ev->b_started.Notify();
      ev->release_b.WaitForNotification();
    }
    if (task == 2) ev->b_started.WaitForNotification();  // b was taken first, by the other worker.
    ++r->rollouts;
  };
  s.on_task_done = [ev](const actor::TaskResult& r, int n) {
    if (n == 2) ev->clock_s = 60;  // a and c are in place: the limit.
    if (r.task_id == "b") ev->b_done.Notify();
  };
  const EvalRun run = RunEvalTasks(s);
  EXPECT_TRUE(run.abandoned);
  EXPECT_EQ(Ids(run.results), (std::vector<std::string>{"a", "c"}));
  ASSERT_TRUE(run.cut.has_value());
  EXPECT_EQ(run.cut->wall_limit_s, 60);
  EXPECT_EQ(run.cut->tasks_unfinished, (std::vector<std::string>{"b", "d"}));
  EXPECT_EQ(run.cut->rollouts_unfinished, 2);  // b's abandoned, d's never started.

  // The abandoned worker goes on with the schedule's own state once its rollout returns; what it
  // finishes reaches no result already handed back.
  ev->release_b.Notify();
  ev->b_done.WaitForNotification();
  EXPECT_EQ(Ids(run.results), (std::vector<std::string>{"a", "c"}));
}

// A limit whose tasks all end in time: no cut, and the workers are joined.
TEST(RunEvalTasksTest, ALimitNotReachedCutsNothing) {
  EvalSchedule s;
  s.task_ids = {"a", "b"};
  s.rollouts_per_task = 2;
  s.workers = 4;
  s.wall_limit_s = 60;
  s.start = absl::UnixEpoch();
  s.now = [] { return absl::UnixEpoch(); };
  s.rollout = [](size_t, int, actor::TaskResult* r) { ++r->rollouts; };
  const EvalRun run = RunEvalTasks(s);
  EXPECT_FALSE(run.abandoned);
  EXPECT_FALSE(run.cut.has_value());
  EXPECT_EQ(Ids(run.results), s.task_ids);
}

// A limit already passed between a task's rollouts: that task is unfinished, its finished rollout
// not counted among the unfinished ones, and no worker is left behind.
TEST(RunEvalTasksTest, ATaskCutBetweenItsRolloutsIsLeftOut) {
  std::atomic<int64_t> clock_s{0};
  EvalSchedule s;
  s.task_ids = {"a"};
  s.rollouts_per_task = 3;
  s.wall_limit_s = 10;
  s.start = absl::UnixEpoch();
  s.now = [&clock_s] { return absl::UnixEpoch() + absl::Seconds(clock_s.load()); };
  s.rollout = [&clock_s](size_t, int, actor::TaskResult* r) {
    ++r->rollouts;
    clock_s = 10;  // The first rollout ends at the limit.
  };
  const EvalRun run = RunEvalTasks(s);
  EXPECT_FALSE(run.abandoned);
  EXPECT_TRUE(run.results.empty());
  ASSERT_TRUE(run.cut.has_value());
  EXPECT_EQ(run.cut->tasks_unfinished, (std::vector<std::string>{"a"}));
  EXPECT_EQ(run.cut->rollouts_unfinished, 2);
}

}  // namespace
}  // namespace kernelrl::cli
