#include "learner/rl/ingest.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/testing/testing.h"
#include "gtest/gtest.h"
#include "proto/verdict.pb.h"

namespace kernelrl::learner::rl {
namespace {

using ::kernelrl::testing::NewTempDir;

int CountOf(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

std::vector<v1::Task> Tasks(int n) {
  std::vector<v1::Task> tasks(n);
  for (int i = 0; i < n; ++i) tasks[i].set_id(absl::StrCat("level1/", i, "_Op"));
  return tasks;
}

v1::Trajectory Traj(const v1::TaskLease& lease, const std::string& id, std::mt19937* rng, int64_t version = -1) {
  v1::Trajectory t;
  t.set_id(id);
  t.set_task_id(lease.task().id());
  t.set_job_id(lease.job_id());
  t.set_policy_version(version >= 0 ? version : lease.policy_version());
  const int n = 4 + (*rng)() % 8;
  for (int i = 0; i < n; ++i) {
    const bool model = i >= 2 && (*rng)() % 2;
    t.add_token_ids((*rng)() % 100);
    t.add_loss_mask(model);
    t.add_logprobs(model ? -0.1f * (1 + (*rng)() % 30) : 0.0f);
  }
  t.set_loss_mask(n - 1, 1);
  t.set_logprobs(n - 1, -0.5f);
  t.set_reward(static_cast<int>((*rng)() % 4) - 1);
  t.mutable_final_verdict()->set_outcome(v1::Verdict::OK);
  return t;
}

TEST(IngestTest, LeasePushAckIdempotentTake) {
  std::mt19937 rng(1);
  auto in = Ingest::Open(NewTempDir("ingest_test_"), "job1", {}, 0);
  ASSERT_TRUE(in.ok()) << in.status();
  (*in)->SetStage("agentic_ppo", Tasks(3), 2, -1);
  auto leases = (*in)->Lease("actor-a", 3);
  ASSERT_TRUE(leases.ok());
  ASSERT_EQ(leases->size(), 3u);
  // Each task twice in a row (rollouts_per_task 2), then the next.
  EXPECT_EQ((*leases)[0].task().id(), "level1/0_Op");
  EXPECT_EQ((*leases)[1].task().id(), "level1/0_Op");
  EXPECT_EQ((*leases)[2].task().id(), "level1/1_Op");
  v1::Trajectory t = Traj((*leases)[0], "traj-0", &rng);
  auto ack = (*in)->Push((*leases)[0].lease_id(), t);
  EXPECT_TRUE(ack.accepted()) << ack.reason();
  auto dup = (*in)->Push((*leases)[0].lease_id(), t);
  EXPECT_TRUE(dup.accepted());
  EXPECT_NE(dup.reason().find("duplicate"), std::string::npos);
  // Wrong task for the lease, unknown lease.
  v1::Trajectory wrong = Traj((*leases)[2], "traj-w", &rng);
  wrong.set_task_id("level1/0_Op");
  EXPECT_FALSE((*in)->Push((*leases)[2].lease_id(), wrong).accepted());
  EXPECT_FALSE((*in)->Push("nope", Traj((*leases)[1], "traj-x", &rng)).accepted());
  // Task 0's group has one of its two rollouts: nothing to take yet.
  auto batch = (*in)->Take(10);
  ASSERT_TRUE(batch.ok());
  EXPECT_TRUE(batch->empty());
  IngestInfo info = (*in)->Info();
  EXPECT_EQ(info.accepted, 1);
  EXPECT_EQ(info.duplicates, 1);
  EXPECT_EQ(info.rejected, 2);
  EXPECT_EQ(info.buffer_depth, 1);
  EXPECT_EQ(info.active_leases, 1);  // Lease 1; lease 2 was consumed by the rejected push.
  ASSERT_TRUE((*in)->Push((*leases)[1].lease_id(), Traj((*leases)[1], "traj-1", &rng)).accepted());
  batch = (*in)->Take(10);
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ(batch->size(), 2u);  // The whole group.
  EXPECT_EQ((*batch)[0].token_ids_size(), t.token_ids_size());
}

// Two runs of one job lease the same seeds in the same order, however their
// leases are spread over actors, and read the same warm-up set in the same
// order however its rollouts finished: what RFT and value pretraining train on.
TEST(IngestTest, LeaseSeedsFollowTheJobSeedAndTheWarmupSetIsReadInSeedOrder) {
  std::mt19937 rng(std::random_device{}());
  const uint64_t job_seed = rng();
  IngestOptions options;
  options.seed = job_seed;
  auto a = Ingest::Open(NewTempDir("ingest_seed_a_"), "job1", options, 0);
  auto b = Ingest::Open(NewTempDir("ingest_seed_b_"), "job1", options, 0);
  options.seed = job_seed + 1;
  auto c = Ingest::Open(NewTempDir("ingest_seed_c_"), "job1", options, 0);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  for (auto* in : {&*a, &*b, &*c}) (*in)->SetStage("agent_warmup", Tasks(3), 2, 6);
  auto la = (*a)->Lease("actor-a", 6);  // One actor takes all six...
  std::vector<v1::TaskLease> lb;        // ...or six actors one each.
  for (int i = 0; i < 6; ++i) {
    auto one = (*b)->Lease(absl::StrCat("actor-", rng() % 1000), 1);
    ASSERT_TRUE(one.ok() && one->size() == 1u);
    lb.push_back(one->front());
  }
  auto lc = (*c)->Lease("actor-a", 6);
  ASSERT_TRUE(la.ok() && lc.ok());
  ASSERT_EQ(la->size(), 6u);
  std::set<uint64_t> seeds;
  for (int i = 0; i < 6; ++i) {
    EXPECT_NE((*la)[i].seed(), 0u);
    EXPECT_EQ((*la)[i].seed(), lb[i].seed());
    EXPECT_EQ((*la)[i].task().id(), lb[i].task().id());
    EXPECT_NE((*la)[i].seed(), (*lc)[i].seed());  // Another job seed, other draws.
    seeds.insert((*la)[i].seed());
  }
  EXPECT_EQ(seeds.size(), 6u);
  // Pushed in two different orders, each trajectory named by its lease.
  auto push = [&](Ingest* in, const std::vector<v1::TaskLease>& leases, std::vector<int> order) {
    for (int i : order) {
      v1::Trajectory t = Traj(leases[i], absl::StrCat("t", i), &rng);
      t.mutable_sampling()->set_policy("engineer");
      t.mutable_sampling()->set_seed(leases[i].seed());
      ASSERT_TRUE(in->Push(leases[i].lease_id(), t).accepted());
    }
  };
  std::vector<int> order = {0, 1, 2, 3, 4, 5};
  std::shuffle(order.begin(), order.end(), rng);
  push(a->get(), *la, order);
  std::reverse(order.begin(), order.end());
  push(b->get(), lb, order);
  auto sa = (*a)->AcceptedIn("agent_warmup");
  auto sb = (*b)->AcceptedIn("agent_warmup");
  ASSERT_TRUE(sa.ok() && sb.ok());
  ASSERT_EQ(sa->size(), 6u);
  ASSERT_EQ(sb->size(), 6u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ((*sa)[i].id(), (*sb)[i].id());
    if (i > 0) EXPECT_LT((*sa)[i - 1].sampling().seed(), (*sa)[i].sampling().seed());
  }
}

// Groups of 3 rollouts, batches of 6 (two groups), rollouts pushed in a
// shuffled order by several actors, some leases expiring on the way: every
// batch holds whole groups, and no group's rollouts are trained at two steps.
TEST(IngestTest, AGroupIsNeverSplitAcrossSteps) {
  std::mt19937 rng(7);
  IngestOptions o;
  o.lease_timeout_seconds = 3600;
  o.max_policy_lag = 100;
  auto in = Ingest::Open(NewTempDir("ingest_test_"), "job-g", o, 0);
  ASSERT_TRUE(in.ok()) << in.status();
  (*in)->SetStage("agentic_ppo", Tasks(5), 3, -1);
  std::map<std::string, int64_t> step_of_task_issue;  // "task#issue" -> step.
  std::vector<v1::TaskLease> open;
  int pushed = 0, steps = 0, id = 0;
  for (int round = 0; round < 40; ++round) {
    auto leases = (*in)->Lease("actor-" + std::to_string(round % 3), 1 + rng() % 4);
    ASSERT_TRUE(leases.ok());
    open.insert(open.end(), leases->begin(), leases->end());
    std::shuffle(open.begin(), open.end(), rng);
    // Push a random part of the open leases (the rest finish in later rounds).
    const size_t k = open.empty() ? 0 : rng() % (open.size() + 1);
    for (size_t i = 0; i < k; ++i) {
      v1::Trajectory t = Traj(open.back(), "t" + std::to_string(id++), &rng);
      ASSERT_TRUE((*in)->Push(open.back().lease_id(), t).accepted());
      open.pop_back();
      ++pushed;
    }
    int groups = 0;
    auto batch = (*in)->Take(6, false, &groups);
    ASSERT_TRUE(batch.ok());
    EXPECT_EQ(batch->size() % 3, 0u) << "a batch of whole groups of 3";
    EXPECT_EQ(static_cast<int>(batch->size()), 3 * groups);
    if (groups < 2) continue;
    std::map<std::string, int> per_task;
    std::vector<std::string> ids;
    for (const v1::Trajectory& t : *batch) ++per_task[t.task_id()], ids.push_back(t.id());
    for (const auto& [task, count] : per_task) EXPECT_EQ(count % 3, 0) << task << " split";
    ASSERT_TRUE((*in)->MarkTrained(ids, ++steps).ok());
  }
  EXPECT_GE(steps, 3);
  std::printf("groups of 3, batches of 2 groups: %d pushes, %d steps\n", pushed, steps);
}

// Dynamic sampling: a complete group whose rewards are all equal is dropped
// (counted, not issued again); a group with a spread is kept.
TEST(IngestTest, ZeroVarianceGroupsAreDroppedWhenAsked) {
  std::mt19937 rng(3);
  std::string dir = NewTempDir("ingest_test_");
  auto in = Ingest::Open(dir, "job-z", {}, 0);
  ASSERT_TRUE(in.ok()) << in.status();
  (*in)->SetStage("agentic_ppo", Tasks(2), 2, -1);
  auto leases = (*in)->Lease("a", 4);
  ASSERT_TRUE(leases.ok());
  ASSERT_EQ(leases->size(), 4u);
  const double rewards[] = {1, 1, 1, -1};  // Task 0's group: all 1; task 1's: 1 and -1.
  for (int i = 0; i < 4; ++i) {
    v1::Trajectory t = Traj((*leases)[i], "z" + std::to_string(i), &rng);
    t.set_reward(rewards[i]);
    ASSERT_TRUE((*in)->Push((*leases)[i].lease_id(), t).accepted());
  }
  auto batch = (*in)->Take(4, /*drop_zero_variance=*/true);
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ(batch->size(), 2u);
  EXPECT_EQ((*batch)[0].task_id(), "level1/1_Op");
  EXPECT_EQ((*in)->Info().zero_variance_groups_dropped, 1);
  EXPECT_EQ((*in)->Info().retry_queue, 0);  // Not issued again: fresh tasks take its place.
  // The count survives a restart.
  auto again = Ingest::Open(dir, "job-z", {}, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->Info().zero_variance_groups_dropped, 1);
  EXPECT_EQ((*again)->Info().buffer_depth, 2);
}

// Pushes one trajectory per lease with these rewards (ids tag0, tag1, ...).
void PushRewards(Ingest* in, const std::vector<v1::TaskLease>& leases, const std::vector<double>& rewards,
                 const std::string& tag, std::mt19937* rng) {
  ASSERT_EQ(leases.size(), rewards.size());
  for (size_t i = 0; i < leases.size(); ++i) {
    v1::Trajectory t = Traj(leases[i], tag + std::to_string(i), rng);
    t.set_reward(rewards[i]);
    ASSERT_TRUE(in->Push(leases[i].lease_id(), t).accepted());
  }
}

// The cooldown: a task whose group was dropped for equal rewards is skipped
// by the next groups' tasks until the cooldown has passed (a restart keeps
// it), and when every task cools down the cursor goes on in order.
TEST(IngestTest, ATaskWithEqualRewardsCoolsDownBeforeItsNextGroup) {
  std::mt19937 rng(4);
  std::string dir = NewTempDir("ingest_test_");
  IngestOptions o;
  o.zero_variance_cooldown_groups = 4;
  auto in = Ingest::Open(dir, "job-c", o, 0);
  ASSERT_TRUE(in.ok()) << in.status();
  (*in)->SetStage("agentic_ppo", Tasks(3), 2, -1);
  // Groups 1-3 walk the list; task 0 (group 1) gets equal rewards.
  auto leases = (*in)->Lease("a", 6);
  ASSERT_TRUE(leases.ok());
  ASSERT_EQ(leases->size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ((*leases)[i].task().id(), absl::StrCat("level1/", i / 2, "_Op"));
  PushRewards(in->get(), *leases, {-1, -1, 1, -1, 1, -1}, "c", &rng);
  ASSERT_TRUE((*in)->Take(4, /*drop_zero_variance=*/true).ok());
  EXPECT_EQ((*in)->Info().zero_variance_groups_dropped, 1);
  EXPECT_EQ((*in)->Info().tasks_cooling, 1);
  // Groups 4 and 5 are within the cooldown of task 0's drop at group 1: tasks 1 and 2.
  auto next = (*in)->Lease("a", 4);
  ASSERT_TRUE(next.ok());
  ASSERT_EQ(next->size(), 4u);
  EXPECT_EQ((*next)[0].task().id(), "level1/1_Op");
  EXPECT_EQ((*next)[2].task().id(), "level1/2_Op");
  // A restart rebuilds the cooldown and the walk from the ledger: group 6 is
  // past the cooldown (6 - 1 > 4), so task 0 is back.
  auto again = Ingest::Open(dir, "job-c", o, 0);
  ASSERT_TRUE(again.ok());
  (*again)->SetStage("agentic_ppo", Tasks(3), 2, -1);
  EXPECT_EQ((*again)->Info().tasks_cooling, 0);
  auto after = (*again)->Lease("a", 2);
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->size(), 2u);
  EXPECT_EQ((*after)[0].task().id(), "level1/0_Op");
  // Every task cooling: the cursor goes on in order rather than stall.
  std::string dir2 = NewTempDir("ingest_test_");
  auto one = Ingest::Open(dir2, "job-d", o, 0);
  ASSERT_TRUE(one.ok());
  (*one)->SetStage("agentic_ppo", Tasks(1), 2, -1);
  auto l = (*one)->Lease("a", 2);
  ASSERT_TRUE(l.ok());
  PushRewards(one->get(), *l, {-1, -1}, "d", &rng);
  ASSERT_TRUE((*one)->Take(2, /*drop_zero_variance=*/true).ok());
  EXPECT_EQ((*one)->Info().tasks_cooling, 1);
  auto more = (*one)->Lease("a", 2);
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(more->size(), 2u);
}

// Dynamic sampling's bound: a policy that fails every task would have every
// group dropped and never update; past the bound the groups are kept, until
// a batch is trained, and the drops count again.
TEST(IngestTest, PastTheDropBoundEqualGroupsAreKeptUntilABatchIsTrained) {
  std::mt19937 rng(6);
  std::string dir = NewTempDir("ingest_test_");
  IngestOptions o;
  o.max_zero_variance_drops_per_step = 2;
  auto in = Ingest::Open(dir, "job-b", o, 0);
  ASSERT_TRUE(in.ok()) << in.status();
  (*in)->SetStage("agentic_ppo", Tasks(4), 2, -1);
  auto push_all_fail = [&](int groups, const std::string& tag) {
    auto leases = (*in)->Lease("a", 2 * groups);
    ASSERT_TRUE(leases.ok());
    PushRewards(in->get(), *leases, std::vector<double>(2 * groups, -1.0), tag, &rng);
  };
  push_all_fail(3, "b");
  int groups = 0;
  auto batch = (*in)->Take(2, /*drop_zero_variance=*/true, &groups);
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ((*in)->Info().zero_variance_groups_dropped, 2);  // the bound
  EXPECT_EQ((*in)->Info().zero_variance_groups_kept, 1);
  ASSERT_EQ(groups, 1);  // the third group, trained as it is
  std::vector<std::string> ids;
  for (const v1::Trajectory& t : *batch) ids.push_back(t.id());
  ASSERT_TRUE((*in)->MarkTrained(ids, 1).ok());
  // After the update the drops count from zero again.
  push_all_fail(1, "c");
  batch = (*in)->Take(2, /*drop_zero_variance=*/true, &groups);
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(groups, 0);
  EXPECT_EQ((*in)->Info().zero_variance_groups_dropped, 3);
}

// A model trajectory sampled at another temperature (or with a nucleus cut)
// is rejected and counted; a scripted trajectory is refused where PPO
// trains, and taken in a stage that does not weight by pi / pi_rollout.
TEST(IngestTest, SamplingMismatchAndNonModelTrajectoriesAreRejectedWithAReason) {
  std::mt19937 rng(5);
  IngestOptions o;
  o.temperature = 1.0;
  auto in = Ingest::Open(NewTempDir("ingest_test_"), "job-s", o, 0);
  ASSERT_TRUE(in.ok()) << in.status();
  (*in)->SetStage("agentic_ppo", Tasks(4), 1, -1, /*model_only=*/true);
  auto leases = (*in)->Lease("a", 4);
  ASSERT_TRUE(leases.ok());
  v1::Trajectory hot = Traj((*leases)[0], "hot", &rng);
  hot.mutable_sampling()->set_temperature(0.7);
  auto ack = (*in)->Push((*leases)[0].lease_id(), hot);
  EXPECT_FALSE(ack.accepted());
  EXPECT_NE(ack.reason().find("sampling mismatch"), std::string::npos) << ack.reason();
  v1::Trajectory nucleus = Traj((*leases)[1], "nucleus", &rng);
  nucleus.mutable_sampling()->set_temperature(1.0);
  nucleus.mutable_sampling()->set_top_p(0.9);
  EXPECT_FALSE((*in)->Push((*leases)[1].lease_id(), nucleus).accepted());
  v1::Trajectory scripted = Traj((*leases)[2], "scripted", &rng);
  scripted.mutable_sampling()->set_policy("scripted");
  ack = (*in)->Push((*leases)[2].lease_id(), scripted);
  EXPECT_FALSE(ack.accepted());
  EXPECT_NE(ack.reason().find("non-model policy"), std::string::npos) << ack.reason();
  v1::Trajectory ok = Traj((*leases)[3], "ok", &rng);
  ok.mutable_sampling()->set_temperature(1.0);
  ok.mutable_sampling()->set_top_p(1.0);
  EXPECT_TRUE((*in)->Push((*leases)[3].lease_id(), ok).accepted());
  IngestInfo info = (*in)->Info();
  EXPECT_EQ(info.sampling_mismatch, 2);
  EXPECT_EQ(info.non_model_rejected, 1);
  EXPECT_EQ(info.rejected, 3);
  // The warm-up stage (RFT / value pretraining data) takes scripted trajectories.
  (*in)->SetStage("agent_warmup", Tasks(2), 1, -1, /*model_only=*/false);
  leases = (*in)->Lease("a", 1);
  ASSERT_TRUE(leases.ok());
  ASSERT_FALSE(leases->empty());
  scripted = Traj((*leases)[0], "scripted-warmup", &rng);
  scripted.mutable_sampling()->set_policy("scripted");
  EXPECT_TRUE((*in)->Push((*leases)[0].lease_id(), scripted).accepted());
  // A warm-up that takes only the scripted engineer's trajectories: a model
  // actor's is rejected and its task issued again, then taken from the engineer.
  (*in)->SetStage("agent_warmup_engineer", Tasks(1), 1, 1, /*model_only=*/false, {"scripted"});
  leases = (*in)->Lease("model-actor", 1);
  ASSERT_TRUE(leases.ok());
  ASSERT_EQ(leases->size(), 1u);
  ack = (*in)->Push((*leases)[0].lease_id(), Traj((*leases)[0], "model-warmup", &rng));
  EXPECT_FALSE(ack.accepted());
  EXPECT_NE(ack.reason().find("policy model not taken"), std::string::npos) << ack.reason();
  auto again = (*in)->Lease("engineer", 1);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->size(), 1u) << "the rejected task is issued again";
  EXPECT_EQ((*again)[0].task().id(), (*leases)[0].task().id());
  scripted = Traj((*again)[0], "engineer-warmup", &rng);
  scripted.mutable_sampling()->set_policy("scripted");
  EXPECT_TRUE((*in)->Push((*again)[0].lease_id(), scripted).accepted());
  // take_policies replaces a PPO stage's model-only rule (a plumbing job on a scripted policy).
  (*in)->SetStage("ppo_on_scripted", Tasks(1), 1, -1, /*model_only=*/true, {"scripted"});
  leases = (*in)->Lease("scripted-actor", 1);
  ASSERT_TRUE(leases.ok());
  ASSERT_EQ(leases->size(), 1u);
  scripted = Traj((*leases)[0], "scripted-ppo", &rng);
  scripted.mutable_sampling()->set_policy("scripted");
  ack = (*in)->Push((*leases)[0].lease_id(), scripted);
  EXPECT_TRUE(ack.accepted()) << ack.reason();
}

TEST(IngestTest, ExpiredLeaseIsIssuedAgain) {
  std::mt19937 rng(2);
  ::kernelrl::testing::FakeClock clock;
  IngestOptions o;
  o.lease_timeout_seconds = 30;
  o.clock = &clock;
  auto in = Ingest::Open(NewTempDir("ingest_test_"), "job1", o, 0);
  ASSERT_TRUE(in.ok());
  (*in)->SetStage("s", Tasks(5), 1, -1);
  auto dead = (*in)->Lease("dead-actor", 1);
  ASSERT_TRUE(dead.ok() && dead->size() == 1);
  clock.Advance(absl::Seconds(29));
  auto early = (*in)->Lease("early-actor", 1);  // Not expired yet: fresh work.
  ASSERT_TRUE(early.ok() && early->size() == 1);
  EXPECT_NE((*early)[0].task().id(), (*dead)[0].task().id());
  EXPECT_EQ((*in)->Info().expired_leases, 0);
  clock.Advance(absl::Seconds(2));
  auto next = (*in)->Lease("live-actor", 1);
  ASSERT_TRUE(next.ok() && next->size() == 1);
  EXPECT_EQ((*next)[0].task().id(), (*dead)[0].task().id());  // Re-issued before new work.
  EXPECT_NE((*next)[0].lease_id(), (*dead)[0].lease_id());
  EXPECT_FALSE((*in)->Push((*dead)[0].lease_id(), Traj((*dead)[0], "late", &rng)).accepted());
  EXPECT_EQ((*in)->Info().expired_leases, 1);
}

TEST(IngestTest, InfraErrorsAreRerunThenDroppedNeverTrained) {
  std::mt19937 rng(3);
  IngestOptions o;
  o.max_infra_reruns = 2;
  auto in = Ingest::Open(NewTempDir("ingest_test_"), "job1", o, 0);
  ASSERT_TRUE(in.ok());
  (*in)->SetStage("s", Tasks(1), 1, 1);  // One fresh issue only: what follows are reruns.
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto l = (*in)->Lease("a", 1);
    ASSERT_TRUE(l.ok());
    ASSERT_EQ(l->size(), 1u) << "attempt " << attempt;
    v1::Trajectory t = Traj((*l)[0], absl::StrCat("infra-", attempt), &rng);
    t.set_reward(-1);
    t.mutable_final_verdict()->set_outcome(v1::Verdict::INFRA_ERROR);
    auto ack = (*in)->Push((*l)[0].lease_id(), t);
    EXPECT_FALSE(ack.accepted());
    EXPECT_NE(ack.reason().find(attempt < 2 ? "issued again" : "dropped"), std::string::npos) << ack.reason();
  }
  auto none = (*in)->Lease("a", 1);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_TRUE((*in)->Take(10)->empty());
  EXPECT_EQ((*in)->Info().infra_reruns, 2);
  EXPECT_EQ((*in)->Info().infra_dropped, 1);
}

// The rerun budget is a group's: a task issued in many groups of one stage
// (one task, several fresh issues) keeps its budget per group, so errors
// spread over its groups drop nothing; a restart rebuilds the same counts.
TEST(IngestTest, InfraRerunBudgetIsPerGroupNotPerTask) {
  std::mt19937 rng(5);
  IngestOptions o;
  o.max_infra_reruns = 2;
  const std::string dir = NewTempDir("ingest_test_");
  {
    auto in = Ingest::Open(dir, "job1", o, 0);
    ASSERT_TRUE(in.ok());
    (*in)->SetStage("s", Tasks(1), 1, 4);  // Four groups of the one task.
    for (int g = 0; g < 4; ++g) {
      auto l = (*in)->Lease("a", 1);  // A fresh issue: the earlier group's rerun came back OK.
      ASSERT_TRUE(l.ok() && l->size() == 1u) << "group " << g;
      v1::Trajectory bad = Traj((*l)[0], absl::StrCat("infra-", g), &rng);
      bad.set_reward(-1);
      bad.mutable_final_verdict()->set_outcome(v1::Verdict::INFRA_ERROR);
      auto ack = (*in)->Push((*l)[0].lease_id(), bad);
      EXPECT_NE(ack.reason().find("issued again"), std::string::npos) << "group " << g << ": " << ack.reason();
      auto rerun = (*in)->Lease("a", 1);
      ASSERT_TRUE(rerun.ok() && rerun->size() == 1u);
      EXPECT_TRUE((*in)->Push((*rerun)[0].lease_id(), Traj((*rerun)[0], absl::StrCat("ok-", g), &rng)).accepted());
    }
    EXPECT_EQ((*in)->Info().infra_reruns, 4);
    EXPECT_EQ((*in)->Info().infra_dropped, 0);
  }
  auto again = Ingest::Open(dir, "job1", o, 0);
  ASSERT_TRUE(again.ok());
  (*again)->SetStage("s", Tasks(1), 1, 5);
  auto l = (*again)->Lease("a", 1);  // The fifth group starts with its own budget.
  ASSERT_TRUE(l.ok() && l->size() == 1u);
  v1::Trajectory bad = Traj((*l)[0], "infra-after-restart", &rng);
  bad.set_reward(-1);
  bad.mutable_final_verdict()->set_outcome(v1::Verdict::INFRA_ERROR);
  EXPECT_NE((*again)->Push((*l)[0].lease_id(), bad).reason().find("issued again"), std::string::npos);
  EXPECT_EQ((*again)->Info().infra_dropped, 0);
}

// A group of a stage that has ended leaves the buffer when the next stage takes a batch, as
// "stage over", not as stale: its task is not issued again and the stale count stays the current
// stage's (the warm-up set once agentic PPO begins), also after a restart.
TEST(IngestTest, AnEndedStagesGroupsLeaveTheBufferAsStageOverNotStale) {
  std::mt19937 rng(6);
  IngestOptions o;
  o.max_policy_lag = 1;
  const std::string dir = NewTempDir("ingest_test_");
  {
    auto in = Ingest::Open(dir, "job1", o, 0);
    ASSERT_TRUE(in.ok());
    (*in)->SetStage("agent_warmup", Tasks(2), 1, -1);
    auto l = (*in)->Lease("a", 2);
    ASSERT_TRUE(l.ok() && l->size() == 2);
    for (const auto& lease : *l) EXPECT_TRUE((*in)->Push(lease.lease_id(), Traj(lease, "w-" + lease.lease_id(), &rng)).accepted());
    (*in)->SetPolicyVersion(5);  // RFT and value pretraining updated the policy
    (*in)->SetStage("agentic_ppo", Tasks(2), 1, -1);
    auto p = (*in)->Lease("a", 1);
    ASSERT_TRUE(p.ok() && p->size() == 1);
    EXPECT_TRUE((*in)->Push((*p)[0].lease_id(), Traj((*p)[0], "ppo", &rng, 5)).accepted());
    EXPECT_EQ((*in)->Info().buffer_depth, 3);
    auto batch = (*in)->Take(10);
    ASSERT_TRUE(batch.ok());
    ASSERT_EQ(batch->size(), 1u);
    EXPECT_EQ((*batch)[0].id(), "ppo");
    EXPECT_EQ((*in)->Info().stale_dropped, 0);
    EXPECT_EQ((*in)->Info().buffer_depth, 1) << "the PPO group alone, until it is trained";
    EXPECT_EQ((*in)->AcceptedIn("agent_warmup")->size(), 2u) << "the warm-up set is still RFT's";
  }
  auto ledger = ReadFileToString(dir + "/ledger.jsonl");
  ASSERT_TRUE(ledger.ok());
  EXPECT_EQ(CountOf(*ledger, "\"reason\":\"stage over: now agentic_ppo\""), 2) << *ledger;
  EXPECT_EQ(CountOf(*ledger, "stale"), 0) << *ledger;
  auto again = Ingest::Open(dir, "job1", o, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->Info().stale_dropped, 0);
  EXPECT_EQ((*again)->Info().retry_queue, 0);
}

TEST(IngestTest, StalenessBoundAtPushAndInTheBuffer) {
  std::mt19937 rng(4);
  IngestOptions o;
  o.max_policy_lag = 1;
  auto in = Ingest::Open(NewTempDir("ingest_test_"), "job1", o, 0);
  ASSERT_TRUE(in.ok());
  (*in)->SetStage("s", Tasks(4), 1, -1);
  auto l = (*in)->Lease("a", 3);
  ASSERT_TRUE(l.ok() && l->size() == 3);
  EXPECT_TRUE((*in)->Push((*l)[0].lease_id(), Traj((*l)[0], "v0", &rng)).accepted());
  (*in)->SetPolicyVersion(2);
  auto stale = (*in)->Push((*l)[1].lease_id(), Traj((*l)[1], "v0-late", &rng));
  EXPECT_FALSE(stale.accepted());
  EXPECT_NE(stale.reason().find("stale"), std::string::npos);
  EXPECT_TRUE((*in)->Push((*l)[2].lease_id(), Traj((*l)[2], "v1", &rng, 1)).accepted());
  auto batch = (*in)->Take(10);  // "v0" is two versions behind: dropped, its task re-queued.
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ(batch->size(), 1u);
  EXPECT_EQ((*batch)[0].id(), "v1");
  EXPECT_EQ((*in)->Info().stale_dropped, 1);
  EXPECT_EQ((*in)->Info().retry_queue, 2);
}

TEST(IngestTest, BoundedBuffer) {
  std::mt19937 rng(5);
  IngestOptions o;
  o.buffer_capacity = 2;
  auto in = Ingest::Open(NewTempDir("ingest_test_"), "job1", o, 0);
  ASSERT_TRUE(in.ok());
  (*in)->SetStage("s", Tasks(4), 1, -1);
  auto l = (*in)->Lease("a", 5);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->size(), 2u);  // No more leases than the buffer can take.
  EXPECT_TRUE((*in)->Push((*l)[0].lease_id(), Traj((*l)[0], "a", &rng)).accepted());
  EXPECT_TRUE((*in)->Push((*l)[1].lease_id(), Traj((*l)[1], "b", &rng)).accepted());
  EXPECT_TRUE((*in)->Lease("a", 1)->empty());
  auto b = (*in)->Take(2);
  ASSERT_TRUE((*in)->MarkTrained({(*b)[0].id()}, 1).ok());
  EXPECT_EQ((*in)->Lease("a", 5)->size(), 1u);
}

TEST(IngestTest, AModelStageLeasesNoMoreThanItCanTrainBeforeItGoesStale) {
  std::mt19937 rng(std::random_device{}());
  IngestOptions o;
  const int64_t bound = 3 + rng() % 6;
  o.max_pending_in_stage = bound;
  o.max_policy_lag = 100;
  auto in = Ingest::Open(NewTempDir("ingest_test_"), "job1", o, 0);
  ASSERT_TRUE(in.ok());
  (*in)->SetStage("agentic_ppo", Tasks(5), 1, -1, /*model_only=*/true);
  auto l = (*in)->Lease("a", 100);
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(static_cast<int64_t>(l->size()), bound);
  // Pushed but not trained: still pending, nothing more is leased.
  EXPECT_TRUE((*in)->Push((*l)[0].lease_id(), Traj((*l)[0], "t0", &rng)).accepted());
  EXPECT_TRUE((*in)->Push((*l)[1].lease_id(), Traj((*l)[1], "t1", &rng)).accepted());
  EXPECT_TRUE((*in)->Lease("b", 100)->empty());
  // Trained: room for as many as left.
  auto b = (*in)->Take(2);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->size(), 2u);
  ASSERT_TRUE((*in)->MarkTrained({(*b)[0].id(), (*b)[1].id()}, 1).ok());
  EXPECT_EQ((*in)->Lease("b", 100)->size(), 2u);
  EXPECT_TRUE((*in)->Lease("b", 100)->empty());
  // A collecting stage (the warm-up, not model_only) is bounded by its own count only.
  (*in)->SetStage("agent_warmup", Tasks(5), 1, 2 * bound, /*model_only=*/false);
  EXPECT_EQ(static_cast<int64_t>((*in)->Lease("c", 100)->size()), 2 * bound);
}

// Nine tasks listed family by family, one rollout a group: the ids leased, in order.
std::vector<std::string> LeasedOrder(Ingest* in, const std::string& actor, int n) {
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) {
    auto l = in->Lease(actor, 1);
    if (!l.ok() || l->size() != 1) return ids;
    ids.push_back((*l)[0].task().id());
  }
  return ids;
}

std::vector<v1::Task> FamilyBlockedTasks() {
  std::vector<v1::Task> tasks;
  for (const char* family : {"ew", "rr", "ge"}) {
    for (int i = 0; i < 3; ++i) tasks.emplace_back().set_id(absl::StrCat("train/", family, "_", i));
  }
  return tasks;
}

TEST(IngestTest, AStageCyclesItsTasksInASeededOrderThatAResumeKeeps) {
  std::mt19937_64 rng(std::random_device{}());
  const std::vector<v1::Task> listed = FamilyBlockedTasks();
  std::vector<std::string> listed_ids;
  for (const v1::Task& t : listed) listed_ids.push_back(t.id());
  IngestOptions o;
  o.seed = 1 + rng() % 1000000;
  o.shuffle_tasks = true;
  o.buffer_capacity = 100;
  const std::string dir = NewTempDir("ingest_test_");
  std::vector<std::string> first;
  {
    auto in = Ingest::Open(dir, "job1", o, 0);
    ASSERT_TRUE(in.ok()) << in.status();
    (*in)->SetStage("agentic_ppo", listed, 1, -1);
    first = LeasedOrder(in->get(), "a", 4);
  }
  // A restarted learner (the ledger read back) goes on with the same cycle.
  auto in = Ingest::Open(dir, "job1", o, 0);
  ASSERT_TRUE(in.ok()) << in.status();
  (*in)->SetStage("agentic_ppo", listed, 1, -1);
  std::vector<std::string> order = first;
  for (const std::string& id : LeasedOrder(in->get(), "a", 14)) order.push_back(id);
  ASSERT_EQ(order.size(), 18u);
  const std::vector<std::string> pass(order.begin(), order.begin() + 9);
  EXPECT_EQ(std::set<std::string>(pass.begin(), pass.end()).size(), 9u) << "a pass leases every task once";
  EXPECT_EQ(std::vector<std::string>(order.begin() + 9, order.end()), pass) << "the next pass, the same cycle";
  EXPECT_NE(pass, listed_ids) << "seed " << o.seed << ": the listed order";

  // The same seed and stage give the same cycle; another order seed, another one; off, the listed one.
  auto order_of = [&](IngestOptions opts) {
    auto other = Ingest::Open(NewTempDir("ingest_test_"), "job2", opts, 0);
    if (!other.ok()) return std::vector<std::string>{};
    (*other)->SetStage("agentic_ppo", listed, 1, -1);
    return LeasedOrder(other->get(), "b", 9);
  };
  EXPECT_EQ(order_of(o), pass);
  IngestOptions reseeded = o;
  reseeded.task_order_seed = o.seed + 1 + rng() % 1000;
  const std::vector<std::string> other = order_of(reseeded);
  EXPECT_EQ(std::set<std::string>(other.begin(), other.end()).size(), 9u);
  EXPECT_NE(other, pass);
  IngestOptions listed_order = o;
  listed_order.shuffle_tasks = false;
  EXPECT_EQ(order_of(listed_order), listed_ids);
}

TEST(IngestTest, DeferredTasksComeLastInEachCycleInTheCyclesOrder) {
  std::mt19937_64 rng(std::random_device{}());
  const std::vector<v1::Task> listed = FamilyBlockedTasks();
  IngestOptions o;
  o.seed = 1 + rng() % 1000000;
  o.shuffle_tasks = true;
  o.buffer_capacity = 100;
  auto order_of = [&](const IngestOptions& opts) {
    auto in = Ingest::Open(NewTempDir("ingest_test_"), "job", opts, 0);
    if (!in.ok()) return std::vector<std::string>{};
    (*in)->SetStage("agentic_ppo", listed, 1, -1);
    return LeasedOrder(in->get(), "a", 18);
  };
  const std::vector<std::string> plain = order_of(o);
  ASSERT_EQ(plain.size(), 18u);
  // Three tasks drawn at random, one of them the cycle's first, and one id twice.
  IngestOptions deferring = o;
  std::set<std::string> deferred = {plain[0]};
  while (deferred.size() < 3) deferred.insert(listed[rng() % listed.size()].id());
  deferring.deferred_task_ids.assign(deferred.begin(), deferred.end());
  deferring.deferred_task_ids.push_back(plain[0]);
  const std::vector<std::string> order = order_of(deferring);
  ASSERT_EQ(order.size(), 18u);
  // The cycle as it was, its deferred tasks moved to its end in their own order.
  std::vector<std::string> expected;
  for (int deferred_part = 0; deferred_part < 2; ++deferred_part) {
    for (int i = 0; i < 9; ++i) {
      if (deferred.count(plain[i]) == static_cast<size_t>(deferred_part)) expected.push_back(plain[i]);
    }
  }
  EXPECT_EQ(std::vector<std::string>(order.begin(), order.begin() + 9), expected);
  EXPECT_EQ(std::vector<std::string>(order.begin() + 9, order.end()), expected) << "every cycle, not the first alone";
  IngestOptions unknown = o;
  unknown.deferred_task_ids = {"level9/no_such_task"};
  EXPECT_EQ(order_of(unknown), plain) << "an id the stage lacks moves nothing";
}

TEST(IngestTest, TornLedgerLineIsCutOnOpen) {
  const std::string dir = NewTempDir("ingest_test_");
  std::mt19937 rng(6);
  {
    auto in = Ingest::Open(dir, "job1", {}, 0);
    (*in)->SetStage("s", Tasks(2), 1, -1);
    auto l = (*in)->Lease("a", 1);
    ASSERT_TRUE((*in)->Push((*l)[0].lease_id(), Traj((*l)[0], "t", &rng)).accepted());
  }
  { std::ofstream(dir + "/ledger.jsonl", std::ios::app) << R"({"kind":"TRAINED","trajectory)"; }
  auto in = Ingest::Open(dir, "job1", {}, 0);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ((*in)->Info().buffer_depth, 1);
  EXPECT_EQ(Ledger::Read(dir + "/ledger.jsonl")->size(), 2u);
}

TEST(IngestTest, RecordUpdateIsReadBackAndIgnoredByReplay) {
  const std::string dir = NewTempDir("ingest_test_");
  std::mt19937 rng(8);
  {
    auto in = Ingest::Open(dir, "job1", {}, 0);
    ASSERT_TRUE(in.ok()) << in.status();
    (*in)->SetStage("agentic_ppo", Tasks(2), 1, -1);
    auto l = (*in)->Lease("a", 2);
    ASSERT_TRUE((*in)->Push((*l)[0].lease_id(), Traj((*l)[0], "t0", &rng)).accepted());
    ASSERT_TRUE((*in)->Push((*l)[1].lease_id(), Traj((*l)[1], "t1", &rng)).accepted());
    ASSERT_TRUE((*in)->MarkTrained({"t0"}, 1).ok());
    ASSERT_TRUE((*in)->Commit(1).ok());
    ASSERT_TRUE((*in)->RecordUpdate(1, "agentic_ppo", 1, 1, {{"reward_mean", 0.25}, {"entropy", 3.5}}).ok());
  }
  auto records = Ledger::Read(dir + "/ledger.jsonl");
  ASSERT_TRUE(records.ok()) << records.status();
  const v1::LedgerRecord& u = records->back();
  EXPECT_EQ(u.kind(), v1::LedgerRecord::UPDATE);
  EXPECT_GT(u.unix_ms(), 0);
  EXPECT_EQ(u.step(), 1);
  EXPECT_EQ(u.stage(), "agentic_ppo");
  EXPECT_EQ(u.stage_step(), 1);
  EXPECT_EQ(u.policy_version(), 1);
  EXPECT_EQ(u.metrics().size(), 2u);
  EXPECT_EQ(u.metrics().at("reward_mean"), 0.25);
  EXPECT_EQ(u.metrics().at("entropy"), 3.5);
  // Reopened at the committed step: the UPDATE record changes nothing (t1 still buffered, t0 trained).
  auto in = Ingest::Open(dir, "job1", {}, 1);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ((*in)->Info().buffer_depth, 1);
  EXPECT_EQ((*in)->Info().trained, 1);
  EXPECT_EQ(Ledger::Read(dir + "/ledger.jsonl")->size(), records->size());  // No ROLLBACK written.
}

TEST(IngestTest, UpdatesAfterTheResumedCheckpointAreRolledBackOnce) {
  // Steps 2 and 3 trained nothing from the buffer (RFT on the warm-up set)
  // and had no full checkpoint: their UPDATE records are voided by a ROLLBACK
  // to step 1, which a second reopen does not repeat.
  const std::string dir = NewTempDir("ingest_test_");
  {
    auto in = Ingest::Open(dir, "job1", {}, 0);
    ASSERT_TRUE(in.ok()) << in.status();
    ASSERT_TRUE((*in)->Commit(1).ok());
    for (int step = 1; step <= 3; ++step) ASSERT_TRUE((*in)->RecordUpdate(step, "rft", step, step, {}).ok());
  }
  for (int reopen = 0; reopen < 2; ++reopen) {
    auto in = Ingest::Open(dir, "job1", {}, 1);
    ASSERT_TRUE(in.ok()) << in.status();
  }
  auto records = Ledger::Read(dir + "/ledger.jsonl");
  ASSERT_TRUE(records.ok()) << records.status();
  int rollbacks = 0;
  for (const v1::LedgerRecord& r : *records) {
    if (r.kind() != v1::LedgerRecord::ROLLBACK) continue;
    ++rollbacks;
    EXPECT_EQ(r.step(), 1);
  }
  EXPECT_EQ(rollbacks, 1);
}

// The critic's replay (PpoConfig.critic_replay_batches) reads a stage's last trained batches: by
// their TRAINED records, oldest first, another stage's never; a reopen finds the same ones, and a
// batch whose update was rolled back is not among them.
TEST(IngestTest, TrainedInIsAStagesLastUpdatesAndAReopenFindsThemAgain) {
  std::mt19937 rng(std::random_device{}());
  IngestOptions o;
  o.max_policy_lag = 100;
  const std::string dir = NewTempDir("ingest_test_");
  std::vector<std::vector<std::string>> batches;  // Of agentic_ppo, by update.
  {
    auto in = Ingest::Open(dir, "job-r", o, 0);
    ASSERT_TRUE(in.ok()) << in.status();
    int id = 0;
    int64_t step = 0;
    for (const char* stage : {"single_turn_ppo", "agentic_ppo"}) {
      (*in)->SetStage(stage, Tasks(3), 1, -1);
      for (int update = 0; update < 4; ++update) {
        auto leases = (*in)->Lease("actor", 2);
        ASSERT_TRUE(leases.ok());
        for (const v1::TaskLease& l : *leases) {
          ASSERT_TRUE((*in)->Push(l.lease_id(), Traj(l, absl::StrCat("t", id++), &rng)).accepted());
        }
        auto batch = (*in)->Take(2);
        ASSERT_TRUE(batch.ok());
        ASSERT_EQ(batch->size(), 2u);
        std::vector<std::string> ids;
        for (const v1::Trajectory& t : *batch) ids.push_back(t.id());
        ASSERT_TRUE((*in)->MarkTrained(ids, ++step).ok());
        ASSERT_TRUE((*in)->Commit(step).ok());
        if (std::string(stage) == "agentic_ppo") batches.push_back(ids);
      }
    }
    auto ids_of = [](const std::vector<v1::Trajectory>& ts) {
      std::vector<std::string> out;
      for (const v1::Trajectory& t : ts) out.push_back(t.id());
      return out;
    };
    auto last2 = (*in)->TrainedIn("agentic_ppo", 2);
    ASSERT_TRUE(last2.ok()) << last2.status();
    std::vector<std::string> want = batches[2];
    want.insert(want.end(), batches[3].begin(), batches[3].end());
    EXPECT_EQ(ids_of(*last2), want);
    auto none = (*in)->TrainedIn("agentic_ppo", 0);
    ASSERT_TRUE(none.ok());
    EXPECT_TRUE(none->empty());
    auto all = (*in)->TrainedIn("agentic_ppo", 10);
    ASSERT_TRUE(all.ok());
    EXPECT_EQ(all->size(), 8u);  // This stage's 4 batches only.
  }
  // Resumed from the checkpoint of step 7 (the stage's third update): its fourth is rolled back.
  auto in = Ingest::Open(dir, "job-r", o, 7);
  ASSERT_TRUE(in.ok()) << in.status();
  auto last2 = (*in)->TrainedIn("agentic_ppo", 2);
  ASSERT_TRUE(last2.ok()) << last2.status();
  std::vector<std::string> got, want = batches[1];
  want.insert(want.end(), batches[2].begin(), batches[2].end());
  for (const v1::Trajectory& t : *last2) got.push_back(t.id());
  EXPECT_EQ(got, want);
}

// The test oracle: trajectory id -> times trained, net of rollbacks.
std::map<std::string, int> TrainedCounts(const std::vector<v1::LedgerRecord>& records) {
  std::vector<std::pair<std::string, int64_t>> trained;
  for (const v1::LedgerRecord& r : records) {
    if (r.kind() == v1::LedgerRecord::TRAINED) trained.push_back({r.trajectory_id(), r.step()});
    if (r.kind() == v1::LedgerRecord::ROLLBACK) {
      trained.erase(std::remove_if(trained.begin(), trained.end(), [&](auto& p) { return p.second > r.step(); }),
                    trained.end());
    }
  }
  std::map<std::string, int> counts;
  for (auto& [id, step] : trained) ++counts[id];
  return counts;
}

// A training loop on the ingest core in a child process: actors push, the
// trainer takes 3, records TRAINED for step s, "checkpoints" s (an atomic
// file), commits. The parent kill -9s it at a random moment, restarts from
// the checkpointed step, and finally every accepted trajectory was trained
// exactly once.
int64_t ReadStep(const std::string& dir) {
  auto s = ReadFileToString(dir + "/step");
  return s.ok() ? std::stoll(*s) : 0;
}

void TrainLoop(const std::string& dir, int total_steps, int seed) {
  std::mt19937 rng(seed);
  int64_t step = ReadStep(dir);
  auto in = Ingest::Open(dir, "job1", {}, step);
  if (!in.ok()) _exit(3);
  (*in)->SetStage("agentic_ppo", Tasks(7), 1, -1);
  (*in)->SetPolicyVersion(step);
  int pushed = 0;
  while (step < total_steps) {
    auto leases = (*in)->Lease("actor", 2);
    for (const v1::TaskLease& l : *leases) {
      (*in)->Push(l.lease_id(), Traj(l, absl::StrCat("s", seed, "-", pushed++), &rng));
    }
    auto batch = (*in)->Take(3);
    if (batch->size() < 3) continue;
    std::vector<std::string> ids;
    for (const auto& t : *batch) ids.push_back(t.id());
    if (!(*in)->MarkTrained(ids, step + 1).ok()) _exit(4);
    if (!WriteFileAtomically(dir + "/step", std::to_string(step + 1)).ok()) _exit(5);
    if (!(*in)->Commit(++step).ok()) _exit(6);
    (*in)->SetPolicyVersion(step);
  }
  _exit(0);
}

TEST(IngestTest, KillNineMidJobTrainsEveryTrajectoryExactlyOnce) {
  const std::string dir = NewTempDir("ingest_test_");
  std::mt19937 rng(7);
  const int kSteps = 60;
  int kills = 0;
  for (int round = 0; round < 12 && ReadStep(dir) < kSteps; ++round) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) TrainLoop(dir, kSteps, 100 + round);
    std::this_thread::sleep_for(std::chrono::microseconds(2000 + rng() % 20000));
    if (kill(pid, SIGKILL) == 0) ++kills;
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0)) << status;
  }
  const pid_t pid = fork();
  if (pid == 0) TrainLoop(dir, kSteps, 999);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_GE(kills, 1);
  auto records = Ledger::Read(dir + "/ledger.jsonl");
  ASSERT_TRUE(records.ok());
  std::map<std::string, int> counts = TrainedCounts(*records);
  EXPECT_EQ(counts.size(), 3u * kSteps);
  for (auto& [id, n] : counts) EXPECT_EQ(n, 1) << id;
  // Every trained trajectory was accepted, and nothing accepted was lost:
  // what is neither trained nor dropped as stale (a DROPPED record, its task
  // issued again) is still in the buffer of a reopened ingest.
  std::set<std::string> accepted, dropped;
  for (const auto& r : *records) {
    if (r.kind() == v1::LedgerRecord::ACCEPTED) {
      EXPECT_TRUE(accepted.insert(r.trajectory_id()).second);
    }
    if (r.kind() == v1::LedgerRecord::DROPPED) dropped.insert(r.trajectory_id());
  }
  for (auto& [id, n] : counts) {
    EXPECT_TRUE(accepted.count(id)) << id;
    EXPECT_FALSE(dropped.count(id)) << "trained and dropped: " << id;
  }
  for (const std::string& id : dropped) EXPECT_TRUE(accepted.count(id)) << "dropped, never accepted: " << id;
  auto in = Ingest::Open(dir, "job1", {}, ReadStep(dir));
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(static_cast<size_t>((*in)->Info().buffer_depth), accepted.size() - counts.size() - dropped.size());
  std::printf("kill -9 rounds: %d, steps %d, accepted %zu, trained %zu, dropped stale %zu\n", kills, kSteps,
              accepted.size(), counts.size(), dropped.size());
}

}  // namespace
}  // namespace kernelrl::learner::rl
