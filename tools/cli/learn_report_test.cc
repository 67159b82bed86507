// The progress bars and the final report of `kernelrl learn`, from made-up jobs
// and held-out evaluations.
#include "tools/cli/learn_report.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace kernelrl::cli {
namespace {

v1::Job JobAt(const std::string& stage, int64_t step, int64_t version) {
  v1::Job job;
  job.set_stage(stage);
  job.set_stage_step(step);
  job.set_policy_version(version);
  return job;
}

// The one line Update gives, "" when none.
std::string Only(const std::vector<std::string>& lines) {
  EXPECT_LE(lines.size(), 1u);
  return lines.empty() ? "" : lines[0];
}

TEST(StageProgress, ABarPerStageThatGrowsByCells) {
  v1::LearnerJobConfig job;
  const int steps = 24 + std::random_device{}() % 100;
  job.mutable_recipe()->mutable_agent_warmup()->set_steps(steps);
  job.mutable_recipe()->mutable_agentic_ppo()->set_steps(4);
  StageProgress p(job);
  std::string first = Only(p.Update(JobAt("agent_warmup", 0, 0)));
  EXPECT_NE(first.find(absl::StrFormat("  0/%d trajectories", steps)), std::string::npos) << first;
  EXPECT_EQ(Only(p.Update(JobAt("agent_warmup", 0, 0))), "");  // Nothing moved.
  int lines = 0;
  for (int s = 1; s <= steps; ++s) lines += !p.Update(JobAt("agent_warmup", s, 0)).empty();
  EXPECT_EQ(lines, 24);  // One line per cell of the bar, however many steps.
  const std::string full = StageProgress::Bar("agent_warmup", steps, steps, 0);
  EXPECT_NE(full.find("[########################]"), std::string::npos) << full;
  v1::Job rft = JobAt("rft", 1, 1);
  rft.set_step(1);
  EXPECT_NE(Only(p.Update(rft)).find("rft"), std::string::npos);  // A stage without a total: a count.
  v1::Job ppo = JobAt("agentic_ppo", 0, 9);
  ppo.set_step(1);  // RFT's one update, which its bar showed
  EXPECT_NE(Only(p.Update(ppo)).find("0/4 updates (policy v9)"), std::string::npos);
}

// A stage whose updates all came between two polls (RFT's few) says how many it made when the
// next stage begins, not just the 0 of its first bar.
TEST(StageProgress, AStageThatEndedBetweenPollsSaysWhatItMade) {
  v1::LearnerJobConfig job;
  job.mutable_recipe()->mutable_value_pretrain()->set_steps(32);
  job.mutable_recipe()->mutable_agentic_ppo()->set_steps(200);
  StageProgress p(job);
  const int rft_updates = 2 + std::random_device{}() % 20;
  EXPECT_NE(Only(p.Update(JobAt("rft", 0, 0))).find("rft              0 updates (policy v0)"), std::string::npos);
  v1::Job value = JobAt("value_pretrain", 1, rft_updates + 1);
  value.set_step(rft_updates + 1);
  std::vector<std::string> lines = p.Update(value);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], absl::StrFormat("rft              done: %d updates", rft_updates));
  EXPECT_NE(lines[1].find("1/32 updates"), std::string::npos) << lines[1];
  v1::Job ppo = JobAt("agentic_ppo", 0, rft_updates + 2);
  ppo.set_step(rft_updates + 2);  // value pretraining stopped after 2 (its explained variance level)
  lines = p.Update(ppo);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "value_pretrain   done: 2 updates");
}

Json Eval(int64_t version, double reward, double pass) {
  Json rollouts = Json::object({{"n", Json(16)}, {"reward_mean", Json(reward)},
                                {"reward_sem", Json(0.1)}, {"pass_rate", Json(pass)},
                                {"faster_than_eager_rate", Json(0)},
                                {"faster_than_compile_rate", Json(0)}});
  return Json::object({{"n", Json(8)}, {"policy_version", Json(version)}, {"reward_mean", Json(1)},
                       {"rollouts", std::move(rollouts)}});
}

TEST(LearnReport, BeforeAfterFromTheFirstAndLastEvaluation) {
  std::mt19937 rng(std::random_device{}());
  const double r0 = std::uniform_real_distribution<>(-1, 0)(rng), r1 = std::uniform_real_distribution<>(0, 1)(rng);
  v1::LearnConfig o;
  o.set_base_checkpoint("/ckpt/tiny");
  o.set_family_dir("/fam");
  o.set_backend("cpu");
  o.set_eval_rollouts(2);
  o.set_eval_temperature(1);
  o.set_ablation("quick_cpu");
  o.mutable_paths()->set_run_dir("/run");
  o.mutable_job()->mutable_recipe()->mutable_rft()->set_epochs(20);
  o.mutable_job()->mutable_recipe()->mutable_single_turn_ppo()->set_skip(true);
  const uint64_t seed = 1 + rng() % 1000;
  o.mutable_job()->set_seed(seed);
  LearnRun run{&o, v1::Job(), Json::array(), 57, 240, "/run/curves", "/run/ckpt/step-9/policy"};
  run.job.set_state(v1::Job::SUCCEEDED);
  run.heldout.push_back(Eval(0, r0, 0.5));
  run.heldout.push_back(Eval(5, 0, 0.6));
  Json final_eval = Eval(9, r1, 0.75);
  final_eval["rollouts"]["faster_than_compile_paid_rate"] = Json(0.125);  // the first two predate the figure
  run.heldout.push_back(final_eval);
  const std::string report = LearnReport(run);
  const size_t paid = report.find("  paid 3 (resolved)");
  ASSERT_NE(paid, std::string::npos) << report;
  const std::string paid_row = report.substr(paid, report.find('\n', paid) - paid);
  EXPECT_NE(paid_row.find("-"), std::string::npos) << paid_row;
  EXPECT_NE(paid_row.find("12%"), std::string::npos) << paid_row;
  EXPECT_NE(report.find(absl::StrFormat("%.2f +- 0.10", r0)), std::string::npos) << report;
  EXPECT_NE(report.find(absl::StrFormat("%.2f +- 0.10", r1)), std::string::npos) << report;
  EXPECT_NE(report.find("before (v0)"), std::string::npos) << report;
  EXPECT_NE(report.find("(before: the base checkpoint; after: the job's last policy)"), std::string::npos) << report;
  EXPECT_EQ(report.find("PPO start"), std::string::npos) << report;  // No agentic evaluation in between.
  EXPECT_NE(report.find("geomean x compile (final)"), std::string::npos) << report;
  EXPECT_NE(report.find("best-of-k > compile"), std::string::npos) << report;
  EXPECT_NE(report.find("after (v9)"), std::string::npos) << report;
  EXPECT_NE(report.find("pass rate (per rollout)"), std::string::npos) << report;
  EXPECT_NE(report.find("50%"), std::string::npos) << report;
  EXPECT_NE(report.find("75%"), std::string::npos) << report;
  EXPECT_EQ(report.find("single-turn"), std::string::npos) << report;  // Skipped stages are not listed.
  EXPECT_NE(report.find("RFT 20 epochs"), std::string::npos) << report;
  EXPECT_NE(report.find(absl::StrCat("(quick_cpu), seed ", seed, "\n")), std::string::npos) << report;
  EXPECT_NE(report.find("57 tasks"), std::string::npos) << report;
  EXPECT_NE(report.find("/run/ckpt/step-9/policy"), std::string::npos) << report;
  EXPECT_NE(report.find("/run/curves/reward.png"), std::string::npos) << report;
  EXPECT_NE(report.find("scripted-engineer trajectories"), std::string::npos) << report;
  EXPECT_EQ(report.find("unjudged"), std::string::npos) << report;  // None: no row.

  // Rollouts the sandbox could not judge are left out of the figures, and the report says how many.
  LearnRun with_unjudged = run;
  with_unjudged.heldout = Json::array();
  Json e0 = Eval(0, r0, 0.5), e9 = Eval(9, r1, 0.75);
  e0["rollouts"]["unjudged"] = Json(int64_t{3});
  with_unjudged.heldout.push_back(e0);
  with_unjudged.heldout.push_back(e9);
  const std::string unjudged = LearnReport(with_unjudged);
  const size_t at = unjudged.find("unjudged, left out");
  ASSERT_NE(at, std::string::npos) << unjudged;
  EXPECT_NE(unjudged.substr(at, unjudged.find('\n', at) - at).find(" 3 "), std::string::npos) << unjudged;

  // Without the start evaluation (--skip_start_eval): PPO start and after, no before.
  LearnRun skipped = run;
  skipped.heldout = Json::array();
  Json ppo = Eval(20, r0, 0.25), last = Eval(30, r1, 0.5);
  ppo["label"] = Json("agentic-0");
  last["label"] = Json("final");
  skipped.heldout.push_back(ppo);
  skipped.heldout.push_back(last);
  const std::string no_start = LearnReport(skipped);
  EXPECT_EQ(no_start.find("before ("), std::string::npos) << no_start;
  EXPECT_NE(no_start.find("PPO start (v20)"), std::string::npos) << no_start;
  EXPECT_NE(no_start.find("after (v30)"), std::string::npos) << no_start;
  EXPECT_NE(no_start.find("(PPO start: what the stages before agentic PPO taught it; after: the job's last policy)"),
            std::string::npos) << no_start;

  EXPECT_EQ(no_start.find("cut at the run's limit"), std::string::npos) << no_start;
  // A final evaluation cut at the run's limit: the report says how many tasks it scored.
  Json cut_last = last;
  cut_last["cut"] = Json::object({{"wall_limit_s", Json(445.2)}, {"tasks_unfinished", Json::array({"a", "b", "c"})},
                                  {"rollouts_unfinished", Json(3)}});
  skipped.heldout = Json::array({ppo, cut_last});
  const std::string cut = LearnReport(skipped);
  EXPECT_NE(cut.find("after (v30): cut at the run's limit (445 s): 8 of 11 tasks scored"), std::string::npos) << cut;

  // A job going on from an earlier one's policy (--skip_ppo_start_eval): its final evaluation alone.
  LearnRun continued = run;
  continued.heldout = Json::array();
  Json only = Eval(3, r1, 0.5);
  only["label"] = Json("final");
  continued.heldout.push_back(only);
  const std::string final_only = LearnReport(continued);
  EXPECT_NE(final_only.find("after (v3)"), std::string::npos) << final_only;
  EXPECT_NE(final_only.find(absl::StrFormat("%.2f +- 0.10", r1)), std::string::npos) << final_only;
  EXPECT_NE(final_only.find("(after: the job's last policy)"), std::string::npos) << final_only;
  EXPECT_EQ(final_only.find("PPO start"), std::string::npos) << final_only;
  // One that a later job goes on from (--skip_final_eval): its PPO start alone, not called "after".
  continued.heldout = Json::array({ppo});
  const std::string start_only = LearnReport(continued);
  EXPECT_NE(start_only.find("PPO start (v20)"), std::string::npos) << start_only;
  EXPECT_EQ(start_only.find("after ("), std::string::npos) << start_only;
  continued.heldout = Json::array();
  EXPECT_NE(LearnReport(continued).find("held-out   no evaluation ran"), std::string::npos);

  // A warm-up taken from an earlier job says so, and from where.
  o.mutable_job()->mutable_recipe()->mutable_agent_warmup()->set_import_job_dir("/run-1/jobs/job-a");
  const std::string imported = LearnReport(run);
  EXPECT_NE(imported.find("imported from /run-1/jobs/job-a"), std::string::npos) << imported;
  EXPECT_EQ(imported.find("scripted-engineer trajectories"), std::string::npos) << imported;
}

TEST(LearnReport, AWarmupThatReachesFewerTasksThanTheSetSaysHowMany) {
  std::mt19937 rng(std::random_device{}());
  const int per_task = 1 + static_cast<int>(rng() % 6), tasks = 2 + static_cast<int>(rng() % 20);
  const int reached = 1 + static_cast<int>(rng() % (tasks - 1));  // Fewer than every task.
  v1::LearnerJobConfig job;
  job.mutable_recipe()->mutable_agent_warmup()->set_steps(reached * per_task - static_cast<int>(rng() % per_task));
  const std::string line = WarmupCoverage(job, per_task, tasks);
  EXPECT_NE(line.find(absl::StrFormat("reach %d of the %d training tasks; the other %d", reached, tasks, tasks - reached)),
            std::string::npos) << line;
  EXPECT_NE(line.find(absl::StrCat("recipe.agent_warmup.steps=", per_task * tasks, " ")), std::string::npos) << line;
  // Enough for every task, an imported set, or no warm-up: nothing to say.
  job.mutable_recipe()->mutable_agent_warmup()->set_steps(per_task * tasks);
  EXPECT_EQ(WarmupCoverage(job, per_task, tasks), "");
  job.mutable_recipe()->mutable_agent_warmup()->set_steps(per_task);
  job.mutable_recipe()->mutable_agent_warmup()->set_import_job_dir("/run-1/jobs/job-a");
  EXPECT_EQ(WarmupCoverage(job, per_task, tasks), "");
  job.mutable_recipe()->mutable_agent_warmup()->clear_import_job_dir();
  job.mutable_recipe()->mutable_agent_warmup()->set_skip(true);
  EXPECT_EQ(WarmupCoverage(job, per_task, tasks), "");
}

// What agentic PPO trained and where its time went, from curves.json's steps and audit: updates of
// other stages are left out, rollout times are weighted by the trajectories each update trained.
TEST(LearnReport, APpoJobSaysWhatItTrainedWhereItsTimeWentAndItsAudit) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> u(0, 1);
  v1::LearnConfig o;
  o.mutable_paths()->set_run_dir("/run");
  LearnRun run{&o, v1::Job(), Json::array(), 9, 400, "/run/curves", ""};
  auto step = [&](const std::string& stage, double trajectories, double tokens, double ev, double dropped, double n,
                  double wall, double policy) {
    Json s = Json::object({{"stage", Json(stage)},
                           {"metrics", Json::object({{"trajectories", Json(trajectories)},
                                                     {"model_tokens", Json(tokens)},
                                                     {"explained_variance", Json(ev)},
                                                     {"zero_variance_groups_dropped_total", Json(dropped)}})}});
    s["trained"] = Json::object({{"n", Json(n)},
                                 {"rollout_wall_s_mean", Json(wall)},
                                 {"rollout_policy_s_mean", Json(policy)},
                                 {"rollout_sandbox_s_mean", Json(wall - policy)}});
    return s;
  };
  run.steps.push_back(step("value_pretrain", 8, 1e6, 5, 99, 8, 1000, 900));  // Not PPO: left out.
  const double ev1 = -u(rng), ev2 = u(rng), ev3 = u(rng) - 0.5;
  const double w1 = 50 + 50 * u(rng), w2 = 50 + 50 * u(rng), w3 = 50 + 50 * u(rng);
  run.steps.push_back(step("agentic_ppo", 8, 16000, ev1, 1, 8, w1, w1 / 2));
  run.steps.push_back(step("agentic_ppo", 8, 20000, ev2, 3, 4, w2, w2 / 2));
  run.steps.push_back(step("agentic_ppo", 8, 24000, ev3, 4, 4, w3, w3 / 2));
  const double wall = (8 * w1 + 4 * w2 + 4 * w3) / 16;
  const double settle = u(rng);
  run.audit = Json::object({{"trajectories_trained", Json(24)},
                            {"hack_flagged", Json(0)},
                            {"hack_flagged_with_reward_above_1", Json(0)},
                            {"integrity_flagged_with_reward_above_1", Json(0)},
                            {"verdict_cache_hit_rate", Json(0.3125)},
                            {"compile_cache_hit_rate", Json(0.64)},
                            {"profiled_verdicts", Json(11)},
                            {"profiled_verdict_wall_s_p50", Json(9.1)},
                            {"profiled_verdict_gpu_queue_s_p50", Json(3.4)},
                            {"profiled_verdict_lease_settle_s_p50", Json(settle)}});
  const std::string report = LearnReport(run);
  EXPECT_NE(report.find("PPO        3 updates: 24 trajectories trained, 4 groups of one reward dropped"),
            std::string::npos) << report;
  EXPECT_NE(report.find(absl::StrFormat("a trained rollout %.0f s\n           (policy %.0f s, sandbox %.0f s)", wall,
                                        wall / 2, wall / 2)),
            std::string::npos) << report;
  EXPECT_NE(report.find("model tokens a trajectory 2500"), std::string::npos) << report;
  const double lo = std::min({ev1, ev2, ev3}), hi = std::max({ev1, ev2, ev3});
  const double median = ev1 + ev2 + ev3 - lo - hi;
  EXPECT_NE(report.find(absl::StrFormat("%.2f (median of 3 updates; %.2f to %.2f)", median, lo, hi)), std::string::npos)
      << report;
  EXPECT_NE(report.find("audit      24 trained: hack-flagged 0 (paid > 1: 0), other flags paid > 1: 0; verdict cache "
                        "31%, compile cache 64%"),
            std::string::npos) << report;
  EXPECT_NE(report.find(absl::StrFormat("a profiled verdict 9.1 s p50 (11 fresh): 3.4 s waiting for the GPU, %.2f s "
                                        "settling after the lease",
                                        settle)),
            std::string::npos) << report;

  // A job without PPO updates or trained trajectories prints neither block.
  run.steps = Json::array();
  run.audit = Json::object();
  const std::string bare = LearnReport(run);
  EXPECT_EQ(bare.find("PPO        "), std::string::npos) << bare;
  EXPECT_EQ(bare.find("audit      "), std::string::npos) << bare;
}

}  // namespace
}  // namespace kernelrl::cli
