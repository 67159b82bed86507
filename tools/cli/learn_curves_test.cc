// UpdatesFromLedger on a ledger written by the learner's own Ledger (so the
// JSON is what protobuf prints: int64 as strings, NaN as "NaN").
#include "tools/cli/learn_curves.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <random>

#include "common/file.h"
#include "common/sha256.h"
#include "common/testing/testing.h"
#include "gtest/gtest.h"
#include "learner/rl/ingest.h"
#include "learner/rl/ledger.h"
#include "tools/cli/learn_report.h"

namespace kernelrl::cli {
namespace {

namespace rl = learner::rl;
using Kind = v1::LedgerRecord::Kind;

constexpr int64_t kStart = 1'700'000'000'000;

v1::LedgerRecord Update(int64_t step, const std::string& stage, int64_t stage_step, double reward, int64_t ms) {
  v1::LedgerRecord r;
  r.set_kind(v1::LedgerRecord::UPDATE);
  r.set_unix_ms(ms);
  r.set_step(step);
  r.set_stage(stage);
  r.set_stage_step(stage_step);
  r.set_policy_version(step);
  (*r.mutable_metrics())["reward_mean"] = reward;
  return r;
}

v1::LedgerRecord Other(Kind kind, int64_t step) {
  v1::LedgerRecord r;
  r.set_kind(kind);
  r.set_step(step);
  return r;
}

std::string JobDir(std::vector<v1::LedgerRecord> records) {
  const std::string dir = ::kernelrl::testing::NewTempDir("learn_curves_test_");
  auto ledger = rl::Ledger::Open(dir + "/ledger.jsonl", nullptr);
  EXPECT_TRUE(ledger.ok()) << ledger.status();
  if (ledger.ok()) {
    EXPECT_TRUE((*ledger)->Append(std::move(records)).ok());
  }
  return dir;
}

TEST(UpdatesFromLedgerTest, OnePointPerStepInOrderWithItsFigures) {
  v1::LedgerRecord rft = Update(2, "rft", 1, 0.5, kStart + 2500);
  (*rft.mutable_metrics())["explained_variance"] = std::nan("");
  (*rft.mutable_metrics())["zero"] = 0;
  const std::string dir = JobDir({Other(v1::LedgerRecord::COMMITTED, 1),
                                  Update(1, "single_turn_ppo", 1, -1, kStart + 1000),
                                  Other(v1::LedgerRecord::COMMITTED, 2), rft});
  { std::ofstream(dir + "/ledger.jsonl", std::ios::app) << R"({"kind":"UPDATE","step":"3)"; }  // Torn.
  auto points = UpdatesFromLedger(dir, kStart);
  ASSERT_TRUE(points.ok()) << points.status();
  ASSERT_EQ(points->size(), 2u) << DumpJson(*points);
  const Json& a = (*points)[0];
  EXPECT_EQ(JsonNumber(*FindJson(a, "step")), 1);
  EXPECT_EQ(FindJson(a, "stage")->get<std::string>(), "single_turn_ppo");
  EXPECT_EQ(JsonNumber(*FindJson(a, "stage_step")), 1);
  EXPECT_EQ(JsonNumber(*FindJson(a, "policy_version")), 1);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(a, "wall_s")), 1.0);
  EXPECT_EQ(JsonNumber(*FindJson(*FindJson(a, "metrics"), "reward_mean")), -1);
  const Json& b = (*points)[1];
  EXPECT_EQ(FindJson(b, "stage")->get<std::string>(), "rft");
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(b, "wall_s")), 2.5);
  EXPECT_EQ(JsonNumber(*FindJson(*FindJson(b, "metrics"), "reward_mean")), 0.5);
  EXPECT_TRUE(std::isnan(JsonNumber(*FindJson(*FindJson(b, "metrics"), "explained_variance"))));
  ASSERT_NE(FindJson(*FindJson(b, "metrics"), "zero"), nullptr);  // Map entries are printed even when 0.
}

TEST(UpdatesFromLedgerTest, RedoneStepKeepsTheLastRollbackVoidsLaterSteps) {
  const std::string dir = JobDir({Update(1, "value_pretrain", 1, 0, kStart), Update(2, "value_pretrain", 2, 0, kStart),
                                  Update(2, "value_pretrain", 2, 7, kStart),  // Step 2 again: the last one counts.
                                  Update(3, "agentic_ppo", 1, 0, kStart),
                                  Other(v1::LedgerRecord::ROLLBACK, 2),  // Resumed from checkpoint 2.
                                  Update(3, "agentic_ppo", 1, 3, kStart), Update(4, "agentic_ppo", 2, 4, kStart),
                                  Other(v1::LedgerRecord::ROLLBACK, 3),  // Step 4 voided, never redone.
                                  Other(v1::LedgerRecord::TRAINED, 9)});
  auto points = UpdatesFromLedger(dir, kStart);
  ASSERT_TRUE(points.ok()) << points.status();
  std::vector<std::pair<int64_t, double>> got;
  for (const Json& p : *points) {
    got.push_back({static_cast<int64_t>(JsonNumber(*FindJson(p, "step"))), JsonNumber(*FindJson(*FindJson(p, "metrics"), "reward_mean"))});
  }
  EXPECT_EQ(got, (std::vector<std::pair<int64_t, double>>{{1, 0}, {2, 7}, {3, 3}}));
}

TEST(UpdatesFromLedgerTest, NoLedgerIsAnError) {
  EXPECT_FALSE(UpdatesFromLedger(::kernelrl::testing::NewTempDir("learn_curves_test_"), kStart).ok());
}

TEST(HeldOutFromReportTest, BestOfRolloutsAndEachRolloutsFinalKernel) {
  // Two tasks, two rollouts each: task a's best is 4x eager / 2x compile, its finals 4x/2x and 1x/0.5x;
  // task b failed both times.
  const std::string dir = ::kernelrl::testing::NewTempDir("learn_curves_report_");
  std::ofstream(dir + "/report.json") << R"({"tasks": [
    {"task_id": "a", "outcome": "OK", "reward": 3, "speedup_vs_eager": 4, "speedup_vs_compile": 2, "rollout_finals": [
      {"outcome": "OK", "reward": 3, "speedup_vs_eager": 4, "speedup_vs_compile": 2, "eager_time_us": 64.5,
       "compile_time_us": 86.1},
      {"outcome": "OK", "reward": 1, "speedup_vs_eager": 1, "speedup_vs_compile": 0.5, "eager_time_us": 64.5,
       "compile_time_us": 86.1}]},
    {"task_id": "b", "outcome": "WRONG_ANSWER", "reward": -1, "rollout_finals": [
      {"outcome": "WRONG_ANSWER", "reward": -1}, {"outcome": "COMPILE_ERROR", "reward": -1}]}]})";
  auto h = HeldOutFromReport(dir + "/report.json");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*h, "pass_rate")), 0.5);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*h, "geomean_speedup_vs_eager")), 4);
  const Json* r = FindJson(*h, "rollouts");
  ASSERT_NE(r, nullptr);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*r, "pass_rate")), 0.5);
  EXPECT_NEAR(JsonNumber(*FindJson(*r, "geomean_speedup_vs_eager")), 2.0, 1e-12);  // sqrt(4 x 1)
  EXPECT_NEAR(JsonNumber(*FindJson(*r, "geomean_speedup_vs_compile")), 1.0, 1e-12);  // sqrt(2 x 0.5)
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*r, "reward_mean")), 0.5);  // (3 + 1 - 1 - 1) / 4
  // Per task, its rollouts' mean reward (not its best): which tasks moved between evaluations.
  const Json* per_task = FindJson(*h, "task_rewards");
  ASSERT_NE(per_task, nullptr);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*per_task, "a")), 2);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*per_task, "b")), -1);
  // Task a: one of its two rollouts faster than compile.
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*FindJson(*h, "task_faster_than_compile"), "a")), 0.5);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*r, "unjudged")), 0);
  // The baselines task a was judged against; b's verdicts had none (it never compiled to a profile).
  const Json* baselines = FindJson(*h, "task_baselines");
  ASSERT_NE(baselines, nullptr);
  ASSERT_NE(FindJson(*baselines, "a"), nullptr);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*FindJson(*baselines, "a"), "eager_us")), 64.5);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*FindJson(*baselines, "a"), "compile_us")), 86.1);
  EXPECT_EQ(FindJson(*baselines, "b"), nullptr);
}

// Faster than compile by the raw ratio (the paper's metric) and as paid (reward 3: the judge
// resolved it above its margin): a 1.02x kernel inside the margin is the first, not the second.
TEST(HeldOutFromReportTest, FasterThanCompileRawAndPaid) {
  const std::string dir = ::kernelrl::testing::NewTempDir("learn_curves_paid_");
  std::ofstream(dir + "/report.json") << R"({"tasks": [
    {"task_id": "a", "outcome": "OK", "reward": 3, "speedup_vs_eager": 4, "speedup_vs_compile": 2, "rollout_finals": [
      {"outcome": "OK", "reward": 3, "speedup_vs_eager": 4, "speedup_vs_compile": 2}]},
    {"task_id": "b", "outcome": "OK", "reward": 2, "speedup_vs_eager": 1.5, "speedup_vs_compile": 1.02, "rollout_finals": [
      {"outcome": "OK", "reward": 2, "speedup_vs_eager": 1.5, "speedup_vs_compile": 1.02}]},
    {"task_id": "c", "outcome": "OK", "reward": 1, "speedup_vs_eager": 0.5, "speedup_vs_compile": 0.4, "rollout_finals": [
      {"outcome": "OK", "reward": 1, "speedup_vs_eager": 0.5, "speedup_vs_compile": 0.4}]},
    {"task_id": "d", "outcome": "WRONG_ANSWER", "reward": -1, "rollout_finals": [{"outcome": "WRONG_ANSWER", "reward": -1}]}]})";
  auto h = HeldOutFromReport(dir + "/report.json");
  ASSERT_TRUE(h.ok()) << h.status();
  for (const Json* figures : {static_cast<const Json*>(&*h), FindJson(*h, "rollouts")}) {
    ASSERT_NE(figures, nullptr);
    EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*figures, "faster_than_compile_rate")), 0.5);
    EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*figures, "faster_than_compile_paid_rate")), 0.25);
  }
  // Per task, by the same rule: kernelrl seeds reads the rate's change over the tasks.
  const Json* per_task = FindJson(*h, "task_faster_than_compile");
  ASSERT_NE(per_task, nullptr);
  std::map<std::string, double> got;
  for (auto it = per_task->begin(); it != per_task->end(); ++it) got[it.key()] = JsonNumber(it.value());
  EXPECT_EQ(got, (std::map<std::string, double>{{"a", 1}, {"b", 1}, {"c", 0}, {"d", 0}}));
}

// A rollout whose final verdict the sandbox could not give (INFRA_ERROR) says nothing about the
// policy: it is counted apart, never scored 0; a task with no judged rollout has no per-task figure.
TEST(HeldOutFromReportTest, UnjudgedRolloutsAreCountedApartNotScored) {
  const std::string dir = ::kernelrl::testing::NewTempDir("learn_curves_unjudged_");
  std::ofstream(dir + "/report.json") << R"({"tasks": [
    {"task_id": "a", "outcome": "OK", "reward": 1, "rollout_finals": [
      {"outcome": "INFRA_ERROR", "reward": 0}, {"outcome": "OK", "reward": 2, "speedup_vs_eager": 1.2,
       "speedup_vs_compile": 0.9}]},
    {"task_id": "b", "outcome": "OK", "reward": 1, "rollout_finals": [{"outcome": "INFRA_ERROR", "reward": 0}]},
    {"task_id": "c", "outcome": "WRONG_ANSWER", "reward": -1, "rollout_finals": [
      {"outcome": "WRONG_ANSWER", "reward": -1}]}]})";
  auto h = HeldOutFromReport(dir + "/report.json");
  ASSERT_TRUE(h.ok()) << h.status();
  const Json* r = FindJson(*h, "rollouts");
  ASSERT_NE(r, nullptr);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*r, "n")), 2);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*r, "unjudged")), 2);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*r, "reward_mean")), 0.5);  // (2 - 1) / 2, not (0 + 2 + 0 - 1) / 4
  const Json* per_task = FindJson(*h, "task_rewards");
  ASSERT_NE(per_task, nullptr);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*per_task, "a")), 2);
  EXPECT_EQ(FindJson(*per_task, "b"), nullptr);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*per_task, "c")), -1);
}

// An evaluation cut at its limit: its figures over the tasks it finished, and the cut carried as is;
// a whole one has no "cut".
TEST(HeldOutFromReportTest, ACutEvaluationCarriesItsCut) {
  const std::string dir = ::kernelrl::testing::NewTempDir("learn_curves_cut_");
  const std::string tasks = R"("tasks": [
    {"task_id": "a", "outcome": "OK", "reward": 2, "rollout_finals": [{"outcome": "OK", "reward": 2}]}])";
  std::ofstream(dir + "/report.json") << "{" << tasks << "}";
  auto whole = HeldOutFromReport(dir + "/report.json");
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(FindJson(*whole, "cut"), nullptr);
  std::ofstream(dir + "/report.json")
      << "{" << tasks << R"(, "cut": {"wall_limit_s": 90, "tasks_unfinished": ["b", "c"], "rollouts_unfinished": 2}})";
  auto cut = HeldOutFromReport(dir + "/report.json");
  ASSERT_TRUE(cut.ok()) << cut.status();
  const Json* c = FindJson(*cut, "cut");
  ASSERT_NE(c, nullptr);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*c, "wall_limit_s")), 90);
  EXPECT_EQ(FindJson(*c, "tasks_unfinished")->size(), 2u);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*c, "rollouts_unfinished")), 2);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(*cut, "n")), 1);  // The finished task alone.
}

}  // namespace
// The audit rates a final verdict's flags by the judge's own severities: a verdict paid 2 with only
// informational flags (noise, attribution) is not counted; one paid 2 with an audit flag is.
TEST(TrainedStatsTest, OnlyFlagsTheJudgeRatesAboveInformationalCountAgainstAReward) {
  struct Case {
    std::string id;
    std::vector<std::string> flags;
    double reward;
  };
  const std::vector<Case> cases = {{"info-only", {"rse_above_target", "in_process_below_trusted",
                                                  "speedup_vs_compile_unresolved", "events_above_cupti"}, 2},
                                   {"audit", {"rse_above_target", "side_stream"}, 2},
                                   {"audit-paid-1", {"side_stream"}, 1}};
  std::vector<v1::LedgerRecord> records;
  for (const Case& c : cases) {
    v1::LedgerRecord r = Other(v1::LedgerRecord::TRAINED, 1);
    r.set_trajectory_id(c.id);
    records.push_back(r);
  }
  const std::string dir = JobDir(records);
  ASSERT_EQ(::mkdir((dir + "/trajectories").c_str(), 0755), 0);
  for (const Case& c : cases) {
    v1::Trajectory t;
    t.set_id(c.id);
    t.set_reward(c.reward);
    t.mutable_final_verdict()->set_outcome(v1::Verdict::OK);
    t.mutable_final_verdict()->set_reward(c.reward);
    for (const std::string& f : c.flags) t.mutable_final_verdict()->add_flags(f);
    std::ofstream(rl::Ingest::TrajectoryFile(dir, c.id), std::ios::binary) << t.SerializeAsString();
  }
  TrainedAudit audit;
  auto stats = TrainedStats(dir, &audit);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(audit.trajectories, 3);
  EXPECT_EQ(audit.flagged_reward_above_1, 1);
  EXPECT_EQ(audit.hack_flagged, 0);
  EXPECT_EQ(audit.flags_seen.count("side_stream"), 1u);
  EXPECT_EQ(audit.flags_seen.count("rse_above_target"), 1u);
}

// The audit's verdict timings: fresh final verdicts that profiled, their wall, their waits for the
// worker's GPU (a verify-only job's gpu_queue; a profiling job's learner lease, clock token and GPU
// alone) and the clock's settle; a verdict served from the cache or that did not profile is left out.
TEST(TrainedStatsTest, ProfiledVerdictsWallGpuWaitAndSettleMedians) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> ms(100, 60000);
  auto profiled = [&] {
    return std::vector<std::pair<std::string, double>>{
        {"compile", 5}, {"gpu_queue", ms(rng)}, {"gpu_lease", ms(rng)}, {"start_queue", ms(rng)},
        {"clock_queue", ms(rng)}, {"verify", 700}, {"lease_settle", ms(rng) / 30}, {"profile", 2800}};
  };
  const std::vector<std::vector<std::pair<std::string, double>>> stages = {
      profiled(), profiled(), profiled(),
      {{"compile", 5}, {"gpu_queue", ms(rng)}, {"verify", 700}},  // Did not profile.
      {{"verdict_cache", 0.1}}};                                   // Served from the cache.
  std::vector<v1::LedgerRecord> records;
  std::vector<double> walls, queues, settles;
  for (size_t i = 0; i < stages.size(); ++i) {
    v1::LedgerRecord r = Other(v1::LedgerRecord::TRAINED, 1);
    r.set_trajectory_id("t" + std::to_string(i));
    records.push_back(r);
  }
  const std::string dir = JobDir(records);
  ASSERT_EQ(::mkdir((dir + "/trajectories").c_str(), 0755), 0);
  for (size_t i = 0; i < stages.size(); ++i) {
    v1::Trajectory t;
    t.set_id("t" + std::to_string(i));
    v1::Verdict& v = *t.mutable_final_verdict();
    v.set_outcome(v1::Verdict::OK);
    double total = 0, queue = 0, settle = 0;
    for (const auto& [name, wall] : stages[i]) {
      v1::StageTiming* st = v.add_stages();
      st->set_stage(name);
      st->set_wall_ms(wall);
      if (name != "lease_settle") total += wall;  // Part of the profile.
      if (name.find("queue") != std::string::npos || name == "gpu_lease") queue += wall;
      if (name == "lease_settle") settle = wall;
    }
    v.add_stages()->set_stage("total");
    v.mutable_stages()->rbegin()->set_wall_ms(total);
    if (i < 3) walls.push_back(total / 1e3), queues.push_back(queue / 1e3), settles.push_back(settle / 1e3);
    std::ofstream(rl::Ingest::TrajectoryFile(dir, t.id()), std::ios::binary) << t.SerializeAsString();
  }
  TrainedAudit audit;
  ASSERT_TRUE(TrainedStats(dir, &audit).ok());
  std::sort(walls.begin(), walls.end());
  std::sort(queues.begin(), queues.end());
  const Json j = audit.ToJson();
  EXPECT_EQ(JsonNumber(*FindJson(j, "profiled_verdicts")), 3);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(j, "profiled_verdict_wall_s_p50")), walls[1]);
  std::sort(settles.begin(), settles.end());
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(j, "profiled_verdict_gpu_queue_s_p50")), queues[1]);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(j, "profiled_verdict_lease_settle_s_p50")), settles[1]);
}

// Each trained step says how its trajectories' rollouts ended, so a policy that starts breaking its
// tool calls (rollouts ended by the parse-error bound) shows at the update where it starts.
TEST(TrainedStatsTest, EachStepCountsItsTrajectoriesStopReasons) {
  std::mt19937 rng(std::random_device{}());
  const std::vector<std::string> reasons = {"submitted", "max_turns", "parse_errors", ""};
  std::vector<v1::LedgerRecord> records;
  std::map<int64_t, std::map<std::string, int>> want;
  for (int i = 0; i < 24; ++i) {
    v1::LedgerRecord r = Other(v1::LedgerRecord::TRAINED, 1 + i % 3);
    r.set_trajectory_id("t" + std::to_string(i));
    records.push_back(r);
  }
  const std::string dir = JobDir(records);
  ASSERT_EQ(::mkdir((dir + "/trajectories").c_str(), 0755), 0);
  for (int i = 0; i < 24; ++i) {
    v1::Trajectory t;
    t.set_id("t" + std::to_string(i));
    const std::string& reason = reasons[rng() % reasons.size()];
    t.mutable_stats()->set_stop_reason(reason);
    t.mutable_stats()->set_wall_seconds(1);
    t.mutable_final_verdict()->set_outcome(v1::Verdict::OK);
    ++want[1 + i % 3][reason.empty() ? "unknown" : reason];
    std::ofstream(rl::Ingest::TrajectoryFile(dir, t.id()), std::ios::binary) << t.SerializeAsString();
  }
  TrainedAudit audit;
  auto stats = TrainedStats(dir, &audit);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 3u);
  for (const auto& [step, st] : *stats) {
    EXPECT_EQ(st.stop_reasons, want[step]) << step;
    const Json j = st.ToJson();
    const Json* got = FindJson(j, "stop_reasons");
    ASSERT_NE(got, nullptr);
    int total = 0;
    for (const auto& [reason, k] : want[step]) {
      ASSERT_NE(FindJson(*got, reason), nullptr) << reason;
      EXPECT_EQ(JsonNumber(*FindJson(*got, reason)), k) << reason;
      total += k;
    }
    EXPECT_EQ(total, 8);
  }
}

// A job's checkpoints as the learner lays them out (learner/checkpoint.h): which holds a policy
// version, which is the last, and the SHA-256 of each one's weights.
TEST(CheckpointWeightsTest, APolicyVersionsDirectoryAndItsWeightsDigest) {
  const std::string job = ::kernelrl::testing::NewTempDir("learn_curves_ckpt_");
  std::mt19937 rng(std::random_device{}());
  std::map<int, std::string> weights;
  ASSERT_TRUE(MakeDir(job + "/checkpoints", 0700).ok());
  for (int v : {3, 5}) {
    const std::string step = job + "/checkpoints/step-0000000" + std::to_string(v + 1);  // Steps and versions differ.
    ASSERT_TRUE(MakeDir(step, 0700).ok());
    ASSERT_TRUE(MakeDir(step + "/policy", 0700).ok());
    std::string bytes(4096 + rng() % 4096, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    weights[v] = bytes;
    ASSERT_TRUE(WriteFileAtomically(step + "/policy/model.safetensors", bytes).ok());
    ASSERT_TRUE(WriteFileAtomically(step + "/policy/config.json", "{}").ok());
    ASSERT_TRUE(WriteFileAtomically(step + "/manifest.json", "{\"policy_version\": " + std::to_string(v) + "}").ok());
  }

  auto v3 = CheckpointPolicyDir(job, 3);
  ASSERT_TRUE(v3.ok()) << v3.status();
  EXPECT_EQ(*v3, job + "/checkpoints/step-00000004/policy");
  EXPECT_EQ(CheckpointPolicyDir(job, 4).status().code(), absl::StatusCode::kNotFound);
  const std::string latest = LatestPolicyCheckpoint(job);  // The final weights' (learn_report.h).
  EXPECT_EQ(latest, job + "/checkpoints/step-00000006/policy");

  auto digest = WeightsDigest(*v3);
  ASSERT_TRUE(digest.ok()) << digest.status();
  EXPECT_EQ(*digest, Json({{"model.safetensors", Sha256Hex(weights[3])}}));  // config.json is not weights.
  auto other = WeightsDigest(latest);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(*digest, *other);
  EXPECT_EQ(WeightsDigest(job).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace kernelrl::cli
