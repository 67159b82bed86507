#include "tools/cli/seeds_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kernelrl::cli {
namespace {

using ::testing::HasSubstr;

Json Eval(const std::string& label, int version, double reward, double compile_rate, double gm_compile, int n = 12) {
  Json per = {{"n", n},
              {"reward_mean", reward},
              {"reward_sem", 0.3},
              {"pass_rate", 0.5},
              {"faster_than_eager_rate", 0.25},
              {"faster_than_compile_rate", compile_rate},
              {"faster_than_compile_paid_rate", compile_rate / 2},
              {"geomean_speedup_vs_compile", gm_compile}};
  Json e = per;
  e["rollouts"] = per;
  e["label"] = label;
  e["policy_version"] = version;
  return e;
}

// An update's metrics; tokens_each < 0: a job that did not report its batch's model tokens.
Json Step(const std::string& stage, double ev, double tokens_each = 2200) {
  Json s = {{"stage", stage},
            {"metrics",
             {{"explained_variance", ev}, {"explained_variance_gae95", ev + 0.501}, {"explained_variance_task_means", ev / 4}}}};
  if (tokens_each >= 0) {
    s["metrics"]["model_tokens"] = 8 * tokens_each;
    s["metrics"]["trajectories"] = 8;
  }
  return s;
}

// A job's curves.json: evaluations at its start (the base), PPO start and end, and its PPO updates.
Json Curves(uint64_t seed, const std::string& ablation, std::vector<Json> heldout, std::vector<double> ppo_ev,
            const std::string& backend = "cuda", double tokens_each = 2200) {
  Json steps = Json::array({Step("value_pretrain", -0.5)});
  for (double ev : ppo_ev) steps.push_back(Step("agentic_ppo", ev, tokens_each));
  return {{"ablation", ablation},
          {"backend", backend},
          {"family_dir", "small"},
          {"hyperparameters_text", absl::StrCat("ppo { epochs: 1 }\nseed: ", seed, "\n")},
          {"steps", steps},
          {"heldout", Json(heldout)},
          {"audit",
           {{"trajectories_trained", 100},
            {"hack_flagged_with_reward_above_1", 0},
            {"integrity_flagged_with_reward_above_1", 0},
            {"verdicts_from_cache", 25}}}};
}

// An evaluation's per-task figures (`field`: task_rewards, task_faster_than_compile).
Json WithTasks(Json e, const std::map<std::string, double>& tasks, const std::string& field = "task_rewards") {
  Json t = Json::object();
  for (const auto& [id, r] : tasks) t[id] = r;
  e[field] = t;
  return e;
}

// A seed whose 12 held-out tasks each change by reward_change -+ 0.1 and compile_change -+ 0.05
// (alternately): their means.
SeedFigures Seed(uint64_t seed, double reward_change, double compile_change, std::vector<double> ev) {
  std::map<std::string, double> start, final, start_compile, final_compile;
  for (int i = 0; i < 12; ++i) {
    const std::string t = absl::StrCat("t", i);
    start[t] = 0;
    final[t] = reward_change + (i % 2 ? 0.1 : -0.1);
    start_compile[t] = 0.1;
    final_compile[t] = 0.1 + compile_change + (i % 2 ? 0.05 : -0.05);
  }
  auto eval = [](Json e, const std::map<std::string, double>& rewards, const std::map<std::string, double>& compile) {
    return WithTasks(WithTasks(std::move(e), rewards), compile, "task_faster_than_compile");
  };
  auto f = SeedFiguresOf({{absl::StrCat("s", seed),
                           Curves(seed, "none",
                                  {Eval("start", 0, -0.5, 0.9, 0.5), eval(Eval("agentic-0", 4, 0.0, 0.1, 0.6), start, start_compile),
                                   eval(Eval("final", 30, reward_change, 0.1 + compile_change, 0.7), final, final_compile)},
                                  ev)}});
  EXPECT_TRUE(f.ok()) << f.status();
  return *f;
}

v1::SeedsConfig Bar() {
  v1::SeedsConfig c;
  c.set_min_standard_errors(2);
  c.set_min_explained_variance(0.3);
  c.set_min_seeds(3);
  c.set_min_heldout_tasks(12);
  c.set_min_model_tokens(2000);
  return c;
}

TEST(SeedsReport, StandardErrorOfTheMean) {
  auto [mean, se] = MeanAndStandardError({1, 2, 3});
  EXPECT_DOUBLE_EQ(mean, 2);
  EXPECT_DOUBLE_EQ(se, 1 / std::sqrt(3.0));  // sd 1 over sqrt(3)
  EXPECT_DOUBLE_EQ(MeanAndStandardError({4}).second, 0);
}

TEST(SeedsReport, StartIsThePpoStartNotTheBase) {
  SeedFigures f = Seed(7, 0.5, 0.2, {0.1, 0.4, 0.5});
  EXPECT_EQ(f.seed, 7u);
  EXPECT_EQ(f.start.label, "agentic-0");
  EXPECT_DOUBLE_EQ(f.start.reward_mean, 0.0);
  EXPECT_EQ(f.final.label, "final");
  EXPECT_DOUBLE_EQ(f.final.faster_than_compile, 0.3);
  EXPECT_EQ(f.explained_variance, (std::vector<double>{0.1, 0.4, 0.5}));  // PPO's only
  EXPECT_EQ(f.trajectories, 100);
}

TEST(SeedsReport, BarMetWhenEverySeedGainsAndTheCriticExplains) {
  const std::string out =
      SeedsReport({Seed(1, 0.5, 0.20, {0.4, 0.5}), Seed(2, 0.4, 0.10, {0.35, 0.6}), Seed(3, 0.6, 0.15, {0.31, 0.9})}, Bar());
  EXPECT_THAT(out, HasSubstr("3 seeds of agentic PPO, 0 ablations"));
  // Reward changes 0.5, 0.4, 0.6: mean 0.50, standard error 0.058, 8.7 of them.
  EXPECT_THAT(out, HasSubstr("reward per rollout       +0.50 +- 0.06  (8.7 standard errors)"));
  // Over the tasks: 0.4 and 0.6 alternately, standard error 0.1 / sqrt(12) x sqrt(12 / 11).
  EXPECT_THAT(out, HasSubstr("over the tasks         +0.50 +- 0.03  (16.6 standard errors)"));
  EXPECT_THAT(out, HasSubstr("faster than compile      +15.00% +- 2.89%  (5.2 standard errors)\n"
                             "    over the tasks         +15.00% +- 1.51%  (9.9 standard errors)"));
  // Paid 3 (resolved above the judge's margin): half of them here; printed, not part of the bar.
  EXPECT_THAT(out, HasSubstr("\n    paid 3 (resolved)      +7.50% +- 1.44%  (5.2 standard errors)\n"));
  EXPECT_THAT(out, HasSubstr("[yes] >= 3 seeds, each on >= 12 held-out tasks"));
  EXPECT_THAT(out, HasSubstr("[yes] held-out reward"));
  EXPECT_THAT(out, HasSubstr("[yes] faster-than-compile rate"));
  EXPECT_THAT(out, HasSubstr("[yes] geomean x compile"));
  EXPECT_THAT(out, HasSubstr("[yes] critic explained variance > 0.3 during PPO (each seed's median: 0.45, 0.47, 0.60)"));
  // The paper's definition beside it, read from the same updates and never the bar.
  EXPECT_THAT(out, HasSubstr("(against the paper's targets V + GAE(lambda 0.95), not the bar: medians 0.95, 0.98, 1.11)"));
  // And what the task line alone would explain of the same batches.
  EXPECT_THAT(out, HasSubstr("(a critic that knew each task's mean reward in the batch: medians 0.11, 0.12, 0.15)"));
  EXPECT_THAT(out, HasSubstr("[yes] >= 2000 model tokens a PPO trajectory (each seed's mean over the trajectories "
                             "it trained: 2200, 2200, 2200)"));
  EXPECT_THAT(out, HasSubstr("[yes] every reward from a CUDA sandbox verdict"));
  EXPECT_THAT(out, HasSubstr("verdict cache  25% of 300 trained"));
}

// The model tokens of a seed's PPO trajectories, over the updates' batches; a job that did not
// report them cannot meet the bar.
TEST(SeedsReport, ModelTokensAPpoTrajectoryAgainstTheBar) {
  auto seed = [](uint64_t s, double tokens_each) {
    auto f = SeedFiguresOf({{absl::StrCat("s", s),
                             Curves(s, "none", {Eval("agentic-0", 4, 0.0, 0.1, 0.6), Eval("final", 30, 0.5, 0.3, 0.7)},
                                    {0.5, 0.5}, "cuda", tokens_each)}});
    EXPECT_TRUE(f.ok()) << f.status();
    return *f;
  };
  EXPECT_THAT(SeedsReport({seed(1, 2400), seed(2, 1608), seed(3, 2100)}, Bar()),
              HasSubstr("[no]  >= 2000 model tokens a PPO trajectory (each seed's mean over the trajectories it "
                        "trained: 2400, 1608, 2100)"));
  EXPECT_THAT(SeedsReport({seed(1, 2400), seed(2, -1)}, Bar()),
              HasSubstr("[no]  >= 2000 model tokens a PPO trajectory (each seed's mean over the trajectories it "
                        "trained: 2400, not recorded)"));
  EXPECT_THAT(SeedsReport({seed(1, 2400), seed(2, 2000)}, Bar()), HasSubstr("[yes] >= 2000 model tokens"));
}

TEST(SeedsReport, BarMissedWhenSeedsDisagreeOrAreTooFew) {
  const std::string out =
      SeedsReport({Seed(1, 0.5, 0.2, {0.5}), Seed(2, -0.5, 0.0, {0.1}), Seed(3, 0.2, 0.1, {0.5})}, Bar());
  EXPECT_THAT(out, HasSubstr("[no]  held-out reward"));            // +0.07 +- 0.29
  EXPECT_THAT(out, HasSubstr("[no]  faster-than-compile rate"));   // +10% +- 5.8%: 1.7 standard errors
  EXPECT_THAT(out, HasSubstr("[no]  critic explained variance"));  // seed 2's median 0.1
  const std::string two = SeedsReport({Seed(1, 0.5, 0.2, {0.5}), Seed(2, 0.5, 0.2, {0.5})}, Bar());
  EXPECT_THAT(two, HasSubstr("[no]  >= 3 seeds"));
}

TEST(SeedsReport, AblationsAreListedNotCounted) {
  auto no_rft = SeedFiguresOf({{"a", Curves(1, "no_rft", {Eval("agentic-0", 2, 0, 0, 0.5), Eval("final", 9, 1, 0.5, 0.9)}, {0.2})}});
  ASSERT_TRUE(no_rft.ok()) << no_rft.status();
  const std::string out = SeedsReport({Seed(1, 0.5, 0.2, {0.5}), *no_rft}, Bar());
  EXPECT_THAT(out, HasSubstr("1 seeds of agentic PPO, 1 ablations"));
  EXPECT_THAT(out, HasSubstr("no_rft, seed 1"));
  EXPECT_THAT(out, HasSubstr("+0.50 +- 0.00"));  // the seed alone
}

TEST(SeedsReport, ContinuedSeedRunsFromItsFirstPpoStartToItsLastFinal) {
  auto f = SeedFiguresOf({{"call1", Curves(2, "none", {Eval("agentic-0", 4, -0.2, 0, 0.4), Eval("final", 20, 0.1, 0.1, 0.5)}, {0.1, 0.2})},
                          {"call2", Curves(2, "none", {Eval("agentic-0", 21, 0.1, 0.1, 0.5), Eval("final", 40, 0.4, 0.2, 0.6)}, {0.3})}});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->name, "call1+call2");
  EXPECT_EQ(f->jobs, 2);
  EXPECT_EQ(f->start.policy_version, 4);
  EXPECT_EQ(f->final.policy_version, 40);
  EXPECT_EQ(f->explained_variance.size(), 3u);
  EXPECT_EQ(f->trajectories, 200);
  // A continuing call that skipped its PPO-start evaluation (--skip_ppo_start_eval): its final alone.
  auto skipped = SeedFiguresOf({{"call1", Curves(2, "none", {Eval("agentic-0", 4, -0.2, 0, 0.4), Eval("final", 20, 0.1, 0.1, 0.5)}, {0.1})},
                                {"call2", Curves(2, "none", {Eval("final", 9, 0.4, 0.2, 0.6)}, {0.3})}});
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_EQ(skipped->start.policy_version, 4);
  EXPECT_EQ(skipped->final.policy_version, 9);
  EXPECT_DOUBLE_EQ(skipped->final.reward_mean, 0.4);
}

// Seed 3's PPO from seed 2's first job's PPO-start policy (no warm-up or RFT of its own): its start
// is that job's PPO-start evaluation; seed 2's updates, audit and later evaluations are not its.
TEST(SeedsReport, AnotherSeedFromTheFirstJobsPpoStartTakesOnlyThatEvaluation) {
  Json first = Curves(2, "none", {Eval("start", 0, -0.9, 0, 0.2), Eval("agentic-0", 37, 1.0, 0.17, 0.67)}, {0.1, 0.2, 0.3});
  Json second = Curves(3, "none", {Eval("final", 4, 1.08, 0.25, 0.73)}, {-0.2, -0.4});
  second["hyperparameters_text"] =
      "recipe { agent_warmup { skip: true } rft { skip: true } }\nseed: 3\n";
  second["audit"]["trajectories_trained"] = 32;
  auto f = SeedFiguresOf({{"s2c1", first}, {"s3c1", second}});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->seed, 3u);
  EXPECT_EQ(f->start_from, "s2c1");
  EXPECT_EQ(f->start.policy_version, 37);
  EXPECT_DOUBLE_EQ(f->start.reward_mean, 1.0);
  EXPECT_EQ(f->final.policy_version, 4);
  EXPECT_EQ(f->explained_variance, (std::vector<double>{-0.2, -0.4}));
  EXPECT_EQ(f->trajectories, 32);
  EXPECT_EQ(f->ppo_trajectories, 16);
  EXPECT_EQ(f->name, "s2c1(PPO start)+s3c1");
  EXPECT_EQ(f->jobs, 1);
  // Seed 2's own chain from the same first job is untouched by it.
  Json later = Curves(2, "none", {Eval("final", 7, 1.08, 0.17, 0.75)}, {0.0});
  auto own = SeedFiguresOf({{"s2c1", first}, {"s2c2", later}});
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->seed, 2u);
  EXPECT_TRUE(own->start_from.empty());
  EXPECT_EQ(own->explained_variance.size(), 4u);
  // A job of another seed that ran its own RFT is not a PPO stage from the first job's start.
  Json own_rft = second;
  own_rft["hyperparameters_text"] = "seed: 3\n";
  auto refused = SeedFiguresOf({{"s2c1", first}, {"s3", own_rft}});
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("one seed's jobs only"));
  // Nor is a third job of another seed.
  auto third = SeedFiguresOf({{"s2c1", first}, {"s2c2", later}, {"s3c1", second}});
  EXPECT_THAT(std::string(third.status().message()), HasSubstr("one seed's jobs only"));
}

// A new arm's seed 2 from seed 2's PPO-start policy: the seed number alone reads it as seed 2's own
// chain; RUN@ppo_start+NEXT says it is not.
TEST(SeedsReport, ASecondJobOfTheSameSeedNumberIsFromThePpoStartWhenSaidSo) {
  Json first = Curves(2, "none", {Eval("start", 0, -0.9, 0, 0.2), Eval("agentic-0", 37, 1.0, 0.17, 0.67)}, {0.1, 0.2, 0.3});
  Json arm = Curves(2, "none", {Eval("final", 4, 1.08, 0.25, 0.73)}, {-0.2, -0.4});
  arm["hyperparameters_text"] = "recipe { agent_warmup { skip: true } rft { skip: true } }\nseed: 2\n";
  auto as_chain = SeedFiguresOf({{"s2c1", first}, {"arm", arm}});
  ASSERT_TRUE(as_chain.ok()) << as_chain.status();
  EXPECT_EQ(as_chain->explained_variance.size(), 5u);  // seed 2's three updates and the arm's two
  auto f = SeedFiguresOf({{"s2c1", first}, {"arm", arm}}, /*from_ppo_start=*/true);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->name, "s2c1(PPO start)+arm");
  EXPECT_EQ(f->start.policy_version, 37);
  EXPECT_EQ(f->explained_variance, (std::vector<double>{-0.2, -0.4}));
  EXPECT_EQ(f->jobs, 1);
  // Said of a job that ran its own RFT, or of a run with nothing after it: refused.
  Json own_rft = arm;
  own_rft["hyperparameters_text"] = "seed: 2\n";
  auto refused = SeedFiguresOf({{"s2c1", first}, {"arm", own_rft}}, true);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("not a PPO stage from s2c1's PPO-start policy"));
  auto alone = SeedFiguresOf({{"s2c1", first}}, true);
  EXPECT_THAT(std::string(alone.status().message()), HasSubstr("RUN@ppo_start+NEXT"));
}

// Each job of a chain records the weights it started from and ended with (and each evaluation the
// weights it scored): a job that did not continue the one before it is refused; curves.json without
// the record still joins, counted as unchecked.
TEST(SeedsReport, ChainLinksAreCheckedByTheirWeights) {
  const Json a = {{"model.safetensors", "aa"}}, b = {{"model.safetensors", "bb"}}, c = {{"model.safetensors", "cc"}};
  Json first = Curves(2, "none", {Eval("agentic-0", 4, -0.2, 0, 0.4), Eval("final", 20, 0.1, 0.1, 0.5)}, {0.1});
  first["heldout"][0]["weights"] = c;
  first["start_weights"] = a;
  first["final_weights"] = b;
  Json next = Curves(2, "none", {Eval("final", 40, 0.4, 0.2, 0.6)}, {0.3});
  next["start_weights"] = b;
  auto f = SeedFiguresOf({{"call1", first}, {"call2", next}});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->links, 1);
  EXPECT_EQ(f->links_checked, 1);
  v1::SeedsConfig config;
  EXPECT_THAT(SeedsReport({*f}, config), HasSubstr("chains: 1 of 1 links checked"));

  Json elsewhere = next;
  elsewhere["start_weights"] = a;  // It started from the base, not from call1's end.
  auto refused = SeedFiguresOf({{"call1", first}, {"call2", elsewhere}});
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("call2: started from weights"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("call1 ended with"));

  // Another seed of the PPO stage starts from the weights call1's PPO-start evaluation scored.
  Json other = Curves(3, "none", {Eval("final", 4, 1.08, 0.25, 0.73)}, {-0.2});
  other["hyperparameters_text"] = "recipe { agent_warmup { skip: true } rft { skip: true } }\nseed: 3\n";
  other["start_weights"] = c;
  auto from_start = SeedFiguresOf({{"call1", first}, {"s3", other}});
  ASSERT_TRUE(from_start.ok()) << from_start.status();
  EXPECT_EQ(from_start->links_checked, 1);
  // Its own next job continues its own end.
  other["final_weights"] = a;
  Json other_next = Curves(3, "none", {Eval("final", 8, 1.1, 0.25, 0.73)}, {-0.1});
  other_next["start_weights"] = a;
  auto other_chain = SeedFiguresOf({{"call1", first}, {"s3", other}, {"s3b", other_next}});
  ASSERT_TRUE(other_chain.ok()) << other_chain.status();
  EXPECT_EQ(other_chain->links_checked, 2);
  other["start_weights"] = b;
  auto not_from_start = SeedFiguresOf({{"call1", first}, {"s3", other}});
  EXPECT_THAT(std::string(not_from_start.status().message()), HasSubstr("the PPO-start policy's of call1"));

  next.erase("start_weights");  // Before the record: joined, not checked.
  auto unrecorded = SeedFiguresOf({{"call1", first}, {"call2", next}});
  ASSERT_TRUE(unrecorded.ok()) << unrecorded.status();
  EXPECT_EQ(unrecorded->links, 1);
  EXPECT_EQ(unrecorded->links_checked, 0);
  EXPECT_THAT(SeedsReport({*unrecorded}, config), HasSubstr("0 of 1 links checked"));
}

// A `kernelrl learn --eval_only` run of the given weights: 12 tasks, `k` rollouts each.
Json Rescoring(const Json& weights, double reward, double temperature = 0.7, int k = 4, int tasks = 12) {
  std::map<std::string, double> per_task;
  for (int i = 0; i < tasks; ++i) per_task[absl::StrCat("t", i)] = reward;
  Json e = WithTasks(Eval("rescore", 0, reward, 0.2, 0.6, tasks), per_task);
  e["rollouts"]["n"] = tasks * k;
  e["weights"] = weights;
  return {{"state", "EVAL_ONLY"}, {"eval_temperature", temperature}, {"eval_rollouts", k},
          {"heldout", Json::array({e})}, {"start_weights", weights}, {"final_weights", weights}};
}

// Re-scorings replace a seed's start and final: each found by the weights that evaluation scored
// (the PPO start's from the next job's start where its evaluation did not record them), and all
// scored alike; a weight with no re-scoring, or re-scorings scored differently, are refused.
TEST(SeedsReport, RescoringsReplaceTheStartAndFinalTheyScoredTheWeightsOf) {
  const Json a = {{"model.safetensors", "aa"}}, b = {{"model.safetensors", "bb"}}, c = {{"model.safetensors", "cc"}};
  Json first = Curves(2, "none", {Eval("start", 0, -0.9, 0, 0.2), Eval("agentic-0", 37, 1.0, 0.17, 0.67)}, {0.1});
  Json second = Curves(3, "none", {Eval("final", 4, 1.08, 0.25, 0.73)}, {-0.2});
  second["hyperparameters_text"] = "recipe { agent_warmup { skip: true } rft { skip: true } }\nseed: 3\n";
  second["start_weights"] = a;  // The PPO-start evaluation of `first` predates the record.
  second["final_weights"] = b;
  auto f = SeedFiguresOf({{"s2c1", first}, {"s3c1", second}});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->start_weights, a);
  EXPECT_EQ(f->final_weights, b);

  std::vector<std::pair<std::string, Json>> runs = {
      {"r-start", Rescoring(a, 0.5)}, {"r-other", Rescoring(c, 2.0)}, {"r-final", Rescoring(b, 0.75)}};
  auto rescorings = RescoringsOf(runs);
  ASSERT_TRUE(rescorings.ok()) << rescorings.status();
  ASSERT_TRUE(Rescore(*rescorings, &*f).ok());
  EXPECT_DOUBLE_EQ(f->start.reward_mean, 0.5);
  EXPECT_DOUBLE_EQ(f->final.reward_mean, 0.75);
  EXPECT_EQ(f->start.n, 12);
  EXPECT_EQ(f->rescored_start, "r-start");
  EXPECT_EQ(f->rescored_final, "r-final");
  const std::string report = SeedsReport({*f}, Bar());
  EXPECT_THAT(report, HasSubstr("re-scored: start r-start, final r-final"));
  EXPECT_THAT(report, HasSubstr("temperature 0.7, 4 rollouts a task"));
  EXPECT_THAT(report, HasSubstr("reward per rollout       +0.25"));
  EXPECT_THAT(report, HasSubstr("each on >= 12 held-out tasks (1 seeds, >= 12 tasks)"));

  // The start's weights re-scored twice: their mean, both named, and their spread shown.
  std::vector<std::pair<std::string, Json>> repeated = runs;
  repeated.push_back({"r-start-again", Rescoring(a, 0.7)});
  auto with_repeat = RescoringsOf(repeated);
  ASSERT_TRUE(with_repeat.ok()) << with_repeat.status();
  auto twice = SeedFiguresOf({{"s2c1", first}, {"s3c1", second}});
  ASSERT_TRUE(Rescore(*with_repeat, &*twice).ok());
  EXPECT_DOUBLE_EQ(twice->start.reward_mean, 0.6);
  EXPECT_DOUBLE_EQ(twice->start.task_rewards.at("t3"), 0.6);
  EXPECT_NEAR(twice->start.reward_sem, std::sqrt(2 * 0.3 * 0.3) / 2, 1e-12);
  EXPECT_EQ(twice->rescored_start, "r-start+r-start-again");
  EXPECT_EQ(twice->start_repeats.size(), 2u);
  EXPECT_TRUE(twice->final_repeats.empty());
  EXPECT_THAT(SeedsReport({*twice}, Bar()),
              HasSubstr("r-start+r-start-again: reward per rollout 0.50, 0.70; faster than compile 20%, 20%; tasks' mean "
                        "rewards apart in 12 of 12 (widest 0.20)"));
  // One file given twice is not a repeat.
  auto same_file = RescoringsOf({runs[0], runs[0]});
  EXPECT_THAT(std::string(same_file.status().message()), HasSubstr("r-start: given twice"));

  // The final's weights, re-scored under no name here: refused, naming them.
  auto missing = SeedFiguresOf({{"s2c1", first}, {"s3c1", second}});
  auto without_final = RescoringsOf({runs[0], runs[1]});
  ASSERT_TRUE(without_final.ok());
  absl::Status s = Rescore(*without_final, &*missing);
  EXPECT_THAT(std::string(s.message()), HasSubstr("no re-scoring of its final's weights"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("bb"));
  // Weights not recorded: refused.
  Json unrecorded = second;
  unrecorded.erase("start_weights");
  auto blind = SeedFiguresOf({{"s2c1", first}, {"s3c1", unrecorded}});
  ASSERT_TRUE(blind.ok()) << blind.status();
  EXPECT_THAT(std::string(Rescore(*rescorings, &*blind).message()), HasSubstr("start evaluation scored were not recorded"));
  // Scored differently: refused, whichever way.
  for (const Json& other : {Rescoring(b, 0.75, 1.0), Rescoring(b, 0.75, 0.7, 2), Rescoring(b, 0.75, 0.7, 4, 11)}) {
    auto apart = RescoringsOf({runs[0], {"r-apart", other}});
    EXPECT_THAT(std::string(apart.status().message()), HasSubstr("r-apart: scored at"));
  }
  // A job's curves.json is not a re-scoring.
  EXPECT_THAT(std::string(RescoringsOf({{"job", second}}).status().message()), HasSubstr("job: not a re-scoring"));
}

// A re-scoring cut at its limit scored only the tasks it finished: refused, naming the file and how
// many tasks it left unfinished; its uncut twin is taken.
TEST(SeedsReport, ACutRescoringIsRefused) {
  const Json a = {{"model.safetensors", "aa"}};
  Json cut = Rescoring(a, 0.5, 0.7, 4, 9);
  cut["heldout"][0]["cut"] = {{"wall_limit_s", 1780}, {"tasks_unfinished", {"t9", "t10", "t11"}}, {"rollouts_unfinished", 7}};
  auto refused = RescoringsOf({{"runs/cut/curves.json", cut}});
  ASSERT_FALSE(refused.ok());
  const std::string message(refused.status().message());
  EXPECT_THAT(message, HasSubstr("runs/cut/curves.json: cut at its 1780 s limit with 3 held-out tasks unfinished"));
  EXPECT_THAT(message, HasSubstr("bias the paired comparison"));
  // Beside whole re-scorings too, first or not.
  auto after_whole = RescoringsOf({{"whole", Rescoring(a, 0.5)}, {"runs/cut/curves.json", cut}});
  EXPECT_THAT(std::string(after_whole.status().message()), HasSubstr("runs/cut/curves.json: cut at"));
  cut["heldout"][0].erase("cut");
  EXPECT_TRUE(RescoringsOf({{"uncut", cut}}).ok());
}

// A job's final evaluation cut at its run's limit scored only the tasks the policy finished sooner:
// refused as the seed's final, naming what it left unscored, unless a re-scoring of its weights
// takes its place; an uncut chain passes.
TEST(SeedsReport, ACutFinalIsRefusedUnlessReScored) {
  const Json a = {{"model.safetensors", "aa"}}, b = {{"model.safetensors", "bb"}};
  Json cut_final = Eval("final", 4, 1.5, 0.3, 0.8, 9);
  cut_final["cut"] = {{"wall_limit_s", 445}, {"tasks_unfinished", {"t9", "t10", "t11"}}, {"rollouts_unfinished", 3}};
  Json job = Curves(1, "none", {Eval("agentic-0", 20, 0.6, 0.1, 0.4), cut_final}, {0.1, 0.2});
  job["start_weights"] = a;
  job["final_weights"] = b;
  job["heldout"][0]["weights"] = a;
  auto f = SeedFiguresOf({{"s1c1", job}});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->start_cut.empty());
  EXPECT_EQ(f->final_cut, "3 of 12 held-out tasks unfinished at the 445 s limit");
  const absl::Status refused = CheckScored(*f);
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("s1c1: its final evaluation was cut (3 of 12 held-out tasks unfinished at the 445 s limit)"));
  auto rescorings = RescoringsOf({{"r-start", Rescoring(a, 0.5)}, {"r-final", Rescoring(b, 0.9)}});
  ASSERT_TRUE(rescorings.ok()) << rescorings.status();
  ASSERT_TRUE(Rescore(*rescorings, &*f).ok());
  EXPECT_TRUE(CheckScored(*f).ok());
  job["heldout"][1] = Eval("final", 4, 1.5, 0.3, 0.8);
  auto whole = SeedFiguresOf({{"s1c1", job}});
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(CheckScored(*whole).ok());
}

// A chain whose last job evaluated nothing after its last update (--skip_final_eval), or only an
// earlier policy at a pause, has a final only where a re-scoring of its final weights takes its place.
TEST(SeedsReport, AFinalNoEvaluationScoredIsTheReScoringOfItsWeights) {
  const Json a = {{"model.safetensors", "aa"}}, b = {{"model.safetensors", "bb"}}, c = {{"model.safetensors", "cc"}};
  Json first = Curves(1, "none", {Eval("agentic-0", 20, 0.6, 0.1, 0.4)}, {});
  first["heldout"][0]["weights"] = a;
  first["final_weights"] = c;
  Json call = Curves(1, "none", {}, {0.1, 0.2});
  call["hyperparameters_text"] = "recipe { agent_warmup { skip: true } rft { skip: true } }\nseed: 1\n";
  call["start_weights"] = a;
  call["final_weights"] = b;
  auto f = SeedFiguresOf({{"start", first}, {"s1c1", call}}, true);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->final_unscored());
  EXPECT_EQ(f->final_weights, b);
  const absl::Status refused = CheckScored(*f);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("no evaluation after the PPO start scored its final weights"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("\"bb\""));
  auto rescorings = RescoringsOf({{"r-start", Rescoring(a, 0.5)}, {"r-final", Rescoring(b, 0.9)}});
  ASSERT_TRUE(rescorings.ok()) << rescorings.status();
  ASSERT_TRUE(Rescore(*rescorings, &*f).ok());
  EXPECT_TRUE(CheckScored(*f).ok());
  EXPECT_DOUBLE_EQ(f->final.reward_mean, 0.9);
  EXPECT_EQ(f->rescored_final, "r-final");
  v1::SeedsConfig config;
  EXPECT_THAT(SeedsReport({*f}, config), HasSubstr("re-scored: start r-start, final r-final"));

  // A pause evaluation of an earlier policy is not the final: the same.
  Json paused = call;
  paused["heldout"] = Json::array({Eval("pause-1", 1, 2.0, 0.5, 0.9)});
  paused["heldout"][0]["weights"] = c;
  auto p = SeedFiguresOf({{"start", first}, {"s1c1", paused}}, true);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->final_unscored());
  EXPECT_EQ(p->final_weights, b);
  EXPECT_FALSE(CheckScored(*p).ok());
  // The evaluation of the last weights is the final, as before.
  paused["heldout"][0]["weights"] = b;
  auto whole = SeedFiguresOf({{"start", first}, {"s1c1", paused}}, true);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_FALSE(whole->final_unscored());
  EXPECT_DOUBLE_EQ(whole->final.reward_mean, 2.0);
  EXPECT_TRUE(CheckScored(*whole).ok());
}

// Seeds of the PPO stage from one start evaluation share its error: the spread of their changes
// cannot show it, so it is added, as the larger of the finals' variance and the start's repeats'.
TEST(SeedsReport, ASharedStartsErrorIsAddedToTheSeedsSpread) {
  const std::vector<double> start = {0.5, 0.5, 0.5}, final = {1.0, 1.1, 0.9};
  // Each seed its own start: the changes' standard error alone, 0.1 / sqrt(3).
  EXPECT_NEAR(ChangeStandardError(start, final, {{}, {}, {}}, {0, 1, 2}), 0.1 / std::sqrt(3.0), 1e-12);
  // One start, evaluated once: + the finals' variance (0.01), once.
  EXPECT_NEAR(ChangeStandardError(start, final, {{}, {}, {}}, {0, 0, 0}), std::sqrt(0.01 / 3 + 0.01), 1e-12);
  // Its two repeats apart by more than the finals: their variance (0.08), over 2.
  const std::vector<double> repeats = {0.3, 0.7};
  EXPECT_NEAR(ChangeStandardError(start, final, {repeats, repeats, repeats}, {0, 0, 0}), std::sqrt(0.01 / 3 + 0.04), 1e-12);
  // Repeats closer than the finals: the finals' variance still bounds one evaluation's noise.
  const std::vector<double> close = {0.49, 0.51};
  EXPECT_NEAR(ChangeStandardError(start, final, {close, close, close}, {0, 0, 0}), std::sqrt(0.01 / 3 + 0.005), 1e-12);
  // Two of three seeds share one: (2/3)^2 of it.
  const std::vector<double> own_start = {0.5, 0.5, 0.4};
  std::vector<double> change = {0.5, 0.6, 0.5};
  EXPECT_NEAR(ChangeStandardError(own_start, final, {{}, {}, {}}, {0, 0, 1}),
              std::sqrt(std::pow(MeanAndStandardError(change).second, 2) + 4.0 / 9 * 0.01), 1e-12);

  // Read from chains: three seeds from one job's PPO start.
  Json first = Curves(1, "none", {Eval("start", 0, -0.9, 0, 0.2), Eval("agentic-0", 37, 0.5, 0.1, 0.6)}, {0.1});
  std::vector<SeedFigures> runs;
  for (uint64_t seed : {2, 3, 4}) {
    Json next = Curves(seed, "none", {Eval("final", 4, final[seed - 2], 0.1, 0.7)}, {0.5});
    next["hyperparameters_text"] = absl::StrCat("recipe { agent_warmup { skip: true } rft { skip: true } }\nseed: ", seed, "\n");
    auto f = SeedFiguresOf({{"call1", first}, {absl::StrCat("s", seed), next}});
    ASSERT_TRUE(f.ok()) << f.status();
    runs.push_back(*f);
  }
  const std::string report = SeedsReport(runs, Bar());
  EXPECT_THAT(report, HasSubstr("seeds share a start evaluation"));
  EXPECT_THAT(report, HasSubstr(absl::StrFormat("reward per rollout       +0.50 +- %.2f  (%.1f standard errors)",
                                                std::sqrt(0.01 / 3 + 0.01), 0.5 / std::sqrt(0.01 / 3 + 0.01))));
}

// Seeds sharing a start move together wherever its one measurement of a task was off: the sign
// test counts tasks, not seed-task pairs.
TEST(SeedsReport, SeedsSharingAStartAreSignTestedByTask) {
  Json first = Curves(1, "none",
                      {Eval("start", 0, -0.9, 0, 0.2),
                       WithTasks(Eval("agentic-0", 37, 0.0, 0.1, 0.6, 3), {{"a", -1}, {"b", 1}, {"c", 1}})},
                      {0.1});
  std::vector<SeedFigures> runs;
  for (uint64_t seed : {2, 3, 4}) {
    Json next = Curves(seed, "none",
                       {WithTasks(Eval("final", 4, 0.3, 0.1, 0.7, 3), {{"a", 1}, {"b", 1}, {"c", seed == 4 ? 2.0 : 1.0}})},
                       {0.5});
    next["hyperparameters_text"] = absl::StrCat("recipe { agent_warmup { skip: true } rft { skip: true } }\nseed: ", seed, "\n");
    auto f = SeedFiguresOf({{"call1", first}, {absl::StrCat("s", seed), next}});
    ASSERT_TRUE(f.ok()) << f.status();
    runs.push_back(*f);
  }
  EXPECT_THAT(SeedsReport(runs, Bar()),
              HasSubstr("4 up, 0 down, 5 unchanged of 9 seed-task pairs; by task (the seeds share a start evaluation): "
                        "2 up, 0 down of 3, sign test p = 0.500"));
}

TEST(SeedsReport, RefusesWhatCannotBeCompared) {
  auto before_ppo = SeedFiguresOf({{"cut.json", Curves(1, "none", {Eval("start", 0, 0, 0, 0.5)}, {})}});
  EXPECT_THAT(std::string(before_ppo.status().message()), HasSubstr("cut.json: no agentic-PPO evaluation"));
  auto no_final = SeedFiguresOf({{"x.json", Curves(1, "none", {Eval("agentic-0", 2, 0, 0, 0.5)}, {})}});
  EXPECT_THAT(std::string(no_final.status().message()), HasSubstr("no evaluation after the PPO start"));
  auto sizes = SeedFiguresOf(
      {{"y.json", Curves(1, "none", {Eval("agentic-0", 2, 0, 0, 0.5, 12), Eval("final", 9, 0, 0, 0.5, 6)}, {})}});
  EXPECT_THAT(std::string(sizes.status().message()), HasSubstr("12 held-out tasks, the final on 6"));
  auto mixed = SeedFiguresOf({{"a", Curves(1, "none", {Eval("agentic-0", 2, 0, 0, 0.5)}, {})},
                              {"b", Curves(2, "none", {Eval("agentic-0", 2, 0, 0, 0.5), Eval("final", 9, 0, 0, 0.5)}, {})}});
  EXPECT_THAT(std::string(mixed.status().message()), HasSubstr("one seed's jobs only"));
}

// Three seeds that each gain by one task flipping: the report names the task and the sign test
// says how little six pairs show; without task_rewards (older curves.json) it says so.
TEST(SeedsReport, PerTaskChangesWithASignTest) {
  std::vector<SeedFigures> runs;
  for (uint64_t seed : {1, 2, 3}) {
    const double flipped = seed == 3 ? -1 : 1;  // Seed 3 loses task c.
    auto f = SeedFiguresOf({{absl::StrCat("s", seed),
                             Curves(seed, "none",
                                    {WithTasks(Eval("agentic-0", 4, 0.0, 0.1, 0.6, 3), {{"a", -1}, {"b", 1}, {"c", 1}}),
                                     WithTasks(Eval("final", 30, 0.2, 0.1, 0.6, 3), {{"a", 1}, {"b", 1}, {"c", flipped}})},
                                    {0.1})}});
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_DOUBLE_EQ(f->start.task_rewards.at("a"), -1);
    runs.push_back(*f);
  }
  const std::string report = SeedsReport(runs, Bar());
  EXPECT_THAT(report, HasSubstr("3 up, 1 down, 5 unchanged of 9 seed-task pairs; sign test p = 0.625"));
  EXPECT_THAT(report, HasSubstr("a: seed 1 -1->1, seed 2 -1->1, seed 3 -1->1"));
  EXPECT_THAT(report, HasSubstr("c: seed 3 1->-1"));
  EXPECT_NEAR(SignTestP(5, 1), 0.21875, 1e-12);  // 2 x 7/64
  EXPECT_DOUBLE_EQ(SignTestP(0, 0), 1);
  EXPECT_NEAR(SignTestP(0, 10), 2.0 / 1024, 1e-12);

  auto old = SeedFiguresOf({{"s4", Curves(4, "none", {Eval("agentic-0", 4, 0.0, 0.1, 0.6, 3), Eval("final", 30, 0.5, 0.1, 0.6, 3)},
                                         {0.1})}});  // No task_rewards.
  ASSERT_TRUE(old.ok()) << old.status();
  runs.push_back(*old);
  const std::string without = SeedsReport(runs, Bar());
  EXPECT_THAT(without, HasSubstr("per task: not in s4 (curves.json without task_rewards)"));
  EXPECT_THAT(without, HasSubstr("over the tasks         not recorded in every seed"));
  EXPECT_THAT(without, HasSubstr("[no]  held-out reward"));
}

// Greedy evaluations of the same tasks: every seed lifts the same one task of 12 from 1 to 2, and
// past compile. The seeds agree exactly (standard error 0), but one task moved: over the tasks it
// is 1 standard error, and neither bar is met.
TEST(SeedsReport, OneTaskMovingInEverySeedIsNotABar) {
  std::map<std::string, double> start, final;
  for (int i = 0; i < 12; ++i) start[absl::StrCat("t", i)] = final[absl::StrCat("t", i)] = i % 3;
  start["t1"] = 1;
  final["t1"] = 2;
  std::map<std::string, double> compile_start, compile_final;  // And t1 faster than compile.
  for (const auto& [t, r] : start) compile_start[t] = compile_final[t] = 0;
  compile_final["t1"] = 1;
  std::vector<SeedFigures> runs;
  for (uint64_t seed : {1, 2, 3}) {
    auto f = SeedFiguresOf({{absl::StrCat("s", seed),
                             Curves(seed, "none",
                                    {WithTasks(WithTasks(Eval("agentic-0", 37, 1.0, 0.0, 0.7), start), compile_start,
                                               "task_faster_than_compile"),
                                     WithTasks(WithTasks(Eval("final", 41, 1.0 + 1.0 / 12, 1.0 / 12, 0.75), final),
                                               compile_final, "task_faster_than_compile")},
                                    {0.1})}});
    ASSERT_TRUE(f.ok()) << f.status();
    runs.push_back(*f);
  }
  const std::string out = SeedsReport(runs, Bar());
  EXPECT_THAT(out, HasSubstr("reward per rollout       +0.08 +- 0.00\n"));
  EXPECT_THAT(out, HasSubstr("over the tasks         +0.08 +- 0.08  (1.0 standard errors)"));
  EXPECT_THAT(out, HasSubstr("[no]  held-out reward: final above PPO start by > 2 standard errors, across the seeds "
                             "and over the tasks"));
  EXPECT_THAT(out, HasSubstr("faster than compile      +8.33% +- 0.00%\n"
                             "    over the tasks         +8.33% +- 8.33%  (1.0 standard errors)"));
  EXPECT_THAT(out, HasSubstr("[no]  faster-than-compile rate"));
}

// Pooled over a seed's PPO tokens: one batch of equal targets has no figure of its own (0), the
// other 0.94; over both batches' tokens the critic explains 0.94 of the targets' variance.
TEST(SeedsReport, ExplainedVariancePooledOverThePpoUpdatesTokens) {
  Json curves = Curves(1, "none", {Eval("agentic-0", 4, 0.0, 0.1, 0.6), Eval("final", 30, 0.2, 0.2, 0.7)}, {0, 0.9375});
  // Batch 1: targets {1, 1}, values {0.9, 1.1}; batch 2: targets {-1, 3}, values {-0.5, 2.5}.
  const double sums[2][5] = {{2, 2, 2, 0, 0.02}, {2, 2, 10, 0, 0.5}};
  int b = 0;
  for (Json& step : curves["steps"]) {
    if (step["stage"] != "agentic_ppo") continue;
    int i = 0;
    for (const char* key : {"ev_tokens", "ev_target_sum", "ev_target_sq_sum", "ev_residual_sum", "ev_residual_sq_sum"}) {
      step["metrics"][key] = sums[b][i++];
    }
    ++b;
  }
  ASSERT_EQ(b, 2);
  auto f = SeedFiguresOf({{"s1", curves}});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_NEAR(f->explained_variance_pooled, 1 - 0.13 / 2, 1e-12);  // Var(d) 0.52/4, Var(targets) 12/4 - 1
  const std::string report = SeedsReport({*f}, v1::SeedsConfig());
  EXPECT_NE(report.find("(pooled over each seed's PPO tokens, not the bar: 0.94)"), std::string::npos) << report;
  // Curves written before the sums were kept: no pooled figure.
  EXPECT_TRUE(std::isnan(Seed(2, 0.1, 0.1, {0.1, 0.2}).explained_variance_pooled));
}

// Evaluations judged against baselines measured apart (another sitting's, another protocol's) are
// named: each seed's change is its own, their levels do not pool.
TEST(SeedsReport, SaysWhenRunsWereJudgedAgainstOtherBaselines) {
  auto with_baselines = [](Json e, std::map<std::string, std::pair<double, double>> tasks) {
    Json t = Json::object();
    for (const auto& [id, us] : tasks) t[id] = {{"eager_us", us.first}, {"compile_us", us.second}};
    e["task_baselines"] = t;
    return e;
  };
  auto seed = [&](uint64_t n, double eager_b) {
    auto f = SeedFiguresOf({{absl::StrCat("s", n),
                             Curves(n, "none",
                                    {with_baselines(Eval("agentic-0", 4, 0.0, 0.1, 0.6), {{"a", {60, 90}}, {"b", {eager_b, 80}}}),
                                     with_baselines(Eval("final", 30, 0.2, 0.1, 0.6), {{"a", {60, 90}}, {"b", {eager_b, 80}}})},
                                    {0.1})}});
    EXPECT_TRUE(f.ok()) << f.status();
    return *f;
  };
  const std::string same = SeedsReport({seed(1, 50), seed(2, 50)}, Bar());
  EXPECT_THAT(same, HasSubstr("baselines      the same in every evaluation (2 tasks, 6 comparisons)"));
  const std::string apart = SeedsReport({seed(1, 50), seed(2, 50), seed(3, 55)}, Bar());
  EXPECT_THAT(apart, HasSubstr("baselines      NOT the same: seed 3 against seed 1 on 1 of 2 tasks "
                               "(b: eager 55.00 vs 50.00 us, torch.compile 80.00 vs 80.00 us)"));
  // Curves written before the record: said, not guessed.
  EXPECT_THAT(SeedsReport({Seed(1, 0.1, 0.1, {0.1})}, Bar()), HasSubstr("baselines      not recorded"));
  // Some recorded, some not: "the same" covers the recorded ones only, and says so.
  auto old = SeedFiguresOf({{"s4", Curves(4, "none", {Eval("agentic-0", 4, 0.0, 0.1, 0.6), Eval("final", 30, 0.2, 0.1, 0.6)},
                                          {0.1})}});
  ASSERT_TRUE(old.ok()) << old.status();
  const std::string mixed = SeedsReport({seed(1, 50), seed(2, 50), *old}, Bar());
  EXPECT_THAT(mixed, HasSubstr("baselines      the same in every evaluation that records them (2 tasks, 6 comparisons); "
                               "not recorded for seed 4 (curves.json before 2026-12-01)"));
  EXPECT_THAT(SeedsReport({seed(1, 50), seed(3, 55), *old}, Bar()),
              HasSubstr("levels across them do not pool; not recorded for seed 4"));
}

// Curves written before the paid rate was recorded: said, not printed as 0.
TEST(SeedsReport, PaidFasterThanCompileNotRecordedIsSaid) {
  auto without_paid = [](Json e) {
    e.erase("faster_than_compile_paid_rate");
    e["rollouts"].erase("faster_than_compile_paid_rate");
    return e;
  };
  auto old = SeedFiguresOf({{"s9", Curves(9, "none", {without_paid(Eval("agentic-0", 4, 0.0, 0.1, 0.6)),
                                                      without_paid(Eval("final", 30, 0.2, 0.1, 0.6))},
                                          {0.1})}});
  ASSERT_TRUE(old.ok()) << old.status();
  const std::string out = SeedsReport({Seed(1, 0.5, 0.2, {0.4}), *old}, Bar());
  EXPECT_THAT(out, HasSubstr("    paid 3 (resolved)      not recorded in every seed"));
}

TEST(SeedsReport, CpuSandboxRewardsFailTheBar) {
  auto cpu = SeedFiguresOf({{"c", Curves(1, "none", {Eval("agentic-0", 2, 0, 0, 0.5), Eval("final", 9, 1, 0, 0.5)}, {0.5}, "cpu")}});
  ASSERT_TRUE(cpu.ok());
  EXPECT_THAT(SeedsReport({*cpu}, Bar()), HasSubstr("[no]  every reward from a CUDA sandbox verdict"));
}

}  // namespace
}  // namespace kernelrl::cli
