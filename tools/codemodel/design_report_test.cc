// The design report reads what trajectories did from their text alone: the
// engineer's episodes (through the actor's rollout loop) parse to their tool
// calls, end in a recognised fp32 design whose reward is the verdict's, and a
// reply that is not JSON counts as a parse error with no kernel.
#include "tools/codemodel/design_report.h"

#include <map>
#include <optional>
#include <random>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "agent/family/templates.h"
#include "agent/policy/engineer_policy.h"
#include "common/testing/testing.h"
#include "data/family/family.h"
#include "gtest/gtest.h"
#include "tools/codemodel/corpus.h"
#include "tools/codemodel/test_tasks.h"

namespace kernelrl::codemodel {
namespace {

// The reference source of the family's CUDA task with `spec`'s ops ("" if none).
std::string CudaTaskSource(const agent::family::TaskSpec& spec) {
  for (const auto& ft : data::family::MakeTasks("cuda")) {
    if (ft.spec.family == spec.family && ft.spec.ops == spec.ops) return ft.source;
  }
  return "";
}

// The CUDA kernel file of `spec` in design `c`.
std::string KernelOf(const agent::family::TaskSpec& spec, const agent::family::Choice& c) {
  auto files = agent::family::Render(spec, c, "cuda");
  EXPECT_TRUE(files.ok()) << files.status();
  return files.ok() ? files->at(agent::KernelPathOf(*files)) : "";
}

// A reply's text for one tool call.
std::string CallText(const std::string& name, Json args) {
  return "<tool_call>\n" + DumpJson(Json::object({{"name", Json(name)}, {"arguments", std::move(args)}})) +
         "\n</tool_call>\n";
}

void AddTurn(v1::Trajectory* t, v1::Turn::Role role, const std::string& content) {
  v1::Turn* x = t->add_turns();
  x->set_role(role);
  x->set_content(content);
}

TEST(DesignReportTest, EngineerEpisodesParseAndEndInTheirDesign) {
  const std::vector<v1::Task> tasks = testing::FirstTrainingTaskPerFamily("cpu");
  std::map<std::string, std::string> sources;
  for (const v1::Task& t : tasks) sources[t.id()] = t.reference_source();
  agent::EngineerPolicyOptions o;
  o.device = "cpu";
  auto corpus = MakeCorpus(tasks, 2, v1::RolloutConfig(), "", o, std::random_device{}(),
                           kernelrl::testing::NewTempDir("design_report"));
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  std::vector<TrajectoryFacts> facts;
  for (const v1::Trajectory& t : corpus->trajectories) {
    TrajectoryFacts f = Facts(t, sources.at(t.task_id()), "cpu");
    EXPECT_EQ(f.parse_errors, 0);
    EXPECT_GE(f.assistant_turns, 4);
    EXPECT_GE(f.tool_calls, f.assistant_turns);  // Turn 1 alone writes two files and compiles.
    ASSERT_EQ(f.design.size(), 4u) << f.design;
    EXPECT_EQ(f.design[3], '0') << "the engineer ends in fp32";
    EXPECT_EQ(f.outcome, "OK");
    EXPECT_EQ(f.reward, f.verdict_reward);
    EXPECT_GT(f.model_tokens, 0);
    EXPECT_EQ(f.failed_file_calls, 0);
    EXPECT_GE(f.profiles, 1);
    EXPECT_EQ(f.revisions, f.profiles - 1);
    EXPECT_EQ(f.revisions_changed_design, f.revisions) << "each of the engineer's revisions changes one slot";
    // The design over the model's tokens: nothing before the first kernel, the final design last.
    ASSERT_GE(f.design_spans.size(), 2u);
    EXPECT_EQ(f.design_spans.front().design, "");
    EXPECT_EQ(f.design_spans.back().design, f.design);
    EXPECT_GE(static_cast<int>(f.design_spans.size()), 2 + f.revisions_changed_design - 1);
    int64_t spanned = 0;
    for (const auto& span : f.design_spans) spanned += span.model_tokens;
    EXPECT_EQ(spanned, f.model_tokens);
    EXPECT_GT(f.design_spans.back().model_tokens, 0);
    facts.push_back(f);
  }
  int64_t total = 0;
  for (const auto& [name, n] : corpus->tool_calls) total += n;
  int64_t counted = 0;
  for (const auto& f : facts) counted += f.tool_calls;
  EXPECT_EQ(counted, total);

  v1::Trajectory leased = corpus->trajectories[0];
  leased.set_id("lease-7/engineer-0-g1/0-3");
  EXPECT_EQ(Facts(leased, sources.at(leased.task_id()), "cpu").source, "engineer");
  EXPECT_EQ(facts[0].source, "model");

  // A model's reply that is no JSON tool call: a parse error, no kernel.
  v1::Trajectory bad = corpus->trajectories[0];
  bad.clear_turns();
  auto* turn = bad.add_turns();
  turn->set_role(v1::Turn::ASSISTANT);
  turn->set_content("<tool_call>\n{\"name\": \"Write\", \"arguments\": {\"path\": 3}}\n</tool_call>");
  const TrajectoryFacts g = Facts(bad, sources.begin()->second, "cpu");
  EXPECT_EQ(g.parse_errors, 1);
  EXPECT_EQ(g.design, "none");
  facts.push_back(g);
  const Json s = Summarise(facts, 10);
  EXPECT_EQ(JsonNumber(*FindJson(s, "trajectories")), static_cast<double>(facts.size()));
  EXPECT_EQ(JsonNumber(*FindJson(s, "parse_errors")), 1);
  // Ids without an engineer actor count as the model's: all of these, so every family has designs.
  EXPECT_EQ(FindJson(s, "designs_by_family")->size(), 3u);
  EXPECT_EQ(JsonNumber(*FindJson(*FindJson(*FindJson(s, "by_source"), "model"), "trajectories")),
            static_cast<double>(facts.size()));
}

// A kernel one line away from a rendering (the task's op line garbled, as the policy writes it)
// reads as that design with "~"; one far from every rendering as "other".
TEST(DesignReportTest, AKernelNearARenderingReadsAsItsDesign) {
  const agent::family::TaskSpec spec{"gemm_epilogue", {"relu"}};
  const std::string source = CudaTaskSource(spec);
  ASSERT_FALSE(source.empty());
  auto files = agent::family::Render(spec, {0, 1, 2, 0}, "cuda");
  ASSERT_TRUE(files.ok()) << files.status();
  const std::string kernel = files->at(agent::KernelPathOf(*files));
  ASSERT_TRUE(absl::StrContains(kernel, "fmaxf(v, 0.f)"));
  auto facts_of = [&](const std::string& text) {
    v1::Trajectory t;
    t.set_task_id("train/ge_relu_1024x512x2048");
    auto* turn = t.add_turns();
    turn->set_role(v1::Turn::ASSISTANT);
    const Json call = Json::object(
        {{"name", Json("Write")},
         {"arguments", Json::object({{"path", Json("kernels/gemm_epilogue.cu")}, {"content", Json(text)}})}});
    turn->set_content("<tool_call>\n" + DumpJson(call) + "\n</tool_call>");
    return Facts(t, source, "cuda");
  };
  auto written = [&](const std::string& text) { return facts_of(text).design; };
  EXPECT_EQ(written(kernel), "0120");
  const std::string garbled = absl::StrReplaceAll(kernel, {{"fmaxf(v, 0.f);", "tanhf(v,"}});
  EXPECT_EQ(written(garbled), "~0120");
  EXPECT_EQ(written("__global__ void k() {}\n"), "other");
  // The op lines: the task's, or another op's under the task's name (as the policy wrote them).
  EXPECT_EQ(facts_of(kernel).op_lines, "right");
  EXPECT_EQ(facts_of(garbled).op_lines, "wrong");
  EXPECT_EQ(facts_of(absl::StrReplaceAll(kernel, {{"fmaxf(v, 0.f);", "tanhf(v);"}})).op_lines, "wrong");
  EXPECT_EQ(facts_of(absl::StrReplaceAll(kernel, {{"// relu", "// tanh"}})).op_lines, "right")
      << "a comment is not code";
  EXPECT_EQ(facts_of("__global__ void k() {}\n").op_lines, "wrong");
}

// The first kernel's op lines are kept apart from the last's: a rollout that first wrote another op
// and then the task's reads "wrong" first and "right" at the end.
TEST(DesignReportTest, TheFirstKernelsOpLinesAreKeptBesideTheLast) {
  const agent::family::TaskSpec spec{"gemm_epilogue", {"relu"}};
  const std::string source = CudaTaskSource(spec);
  ASSERT_FALSE(source.empty());
  const std::string path = "kernels/gemm_epilogue.cu";
  const std::string right = KernelOf(spec, {0, 1, 2, 0});
  const std::string wrong = absl::StrReplaceAll(right, {{"fmaxf(v, 0.f);", "tanhf(v);"}});
  ASSERT_NE(wrong, right);
  v1::Trajectory t;
  t.set_task_id("train/ge_relu_1024x512x2048");
  AddTurn(&t, v1::Turn::ASSISTANT, CallText("Write", Json::object({{"path", Json("model_new.py")}, {"content", Json("x")}})));
  AddTurn(&t, v1::Turn::TOOL, "Wrote model_new.py");
  AddTurn(&t, v1::Turn::ASSISTANT, CallText("Write", Json::object({{"path", Json(path)}, {"content", Json(wrong)}})));
  AddTurn(&t, v1::Turn::TOOL, "Wrote " + path);
  AddTurn(&t, v1::Turn::ASSISTANT, CallText("Write", Json::object({{"path", Json(path)}, {"content", Json(right)}})));
  AddTurn(&t, v1::Turn::TOOL, "Wrote " + path);
  const TrajectoryFacts f = Facts(t, source, "cuda");
  EXPECT_EQ(f.first_op_lines, "wrong");
  EXPECT_EQ(f.op_lines, "right");
  // Without a kernel, neither.
  v1::Trajectory none;
  none.set_task_id(t.task_id());
  AddTurn(&none, v1::Turn::ASSISTANT, "I give up.");
  EXPECT_EQ(Facts(none, source, "cuda").first_op_lines, "");
}

// A revision whose edit the tools refused times the design before it again: counted as a revision
// that did not change the design, and its MultiEdit as a failed file call; a rewrite changes it.
TEST(DesignReportTest, ARevisionWhoseEditFailedTimesTheSameDesign) {
  const agent::family::TaskSpec spec{"gemm_epilogue", {"relu"}};
  const std::string source = CudaTaskSource(spec);
  ASSERT_FALSE(source.empty());
  const std::string path = "kernels/gemm_epilogue.cu";
  const std::string profile = CallText("Profile", Json::object());
  v1::Trajectory t;
  t.set_task_id("train/ge_relu_1024x512x2048");
  AddTurn(&t, v1::Turn::ASSISTANT,
       CallText("Write", Json::object({{"path", Json(path)}, {"content", Json(KernelOf(spec, {0, 1, 2, 0}))}})) + profile);
  AddTurn(&t, v1::Turn::TOOL, "Wrote " + path);
  AddTurn(&t, v1::Turn::TOOL, "Profile: OK");
  Json edits = Json::array();
  edits.push_back(Json::object({{"old_string", Json("#define BLOCK 999")}, {"new_string", Json("#define BLOCK 1")}}));
  AddTurn(&t, v1::Turn::ASSISTANT, CallText("MultiEdit", Json::object({{"path", Json(path)}, {"edits", edits}})) + profile);
  AddTurn(&t, v1::Turn::TOOL, "Error: edit 1: old_string was not found in the file");
  AddTurn(&t, v1::Turn::TOOL, "Profile: OK");
  AddTurn(&t, v1::Turn::ASSISTANT,
       CallText("Write", Json::object({{"path", Json(path)}, {"content", Json(KernelOf(spec, {0, 1, 1, 0}))}})) + profile);
  AddTurn(&t, v1::Turn::TOOL, "Wrote " + path);
  AddTurn(&t, v1::Turn::TOOL, "Profile: OK");
  const TrajectoryFacts f = Facts(t, source, "cuda");
  EXPECT_EQ(f.parse_errors, 0);
  EXPECT_EQ(f.failed_file_calls, 1);
  EXPECT_EQ(f.profiles, 3);
  EXPECT_EQ(f.revisions, 2);
  EXPECT_EQ(f.revisions_changed_design, 1);
  EXPECT_EQ(f.design, "0110");
  const Json model = *FindJson(*FindJson(Summarise({f}, 10), "by_source"), "model");
  EXPECT_EQ(JsonNumber(*FindJson(model, "revisions")), 2);
  EXPECT_EQ(JsonNumber(*FindJson(model, "revisions_changed_design")), 1);
  EXPECT_EQ(JsonNumber(*FindJson(model, "failed_file_calls")), 1);
}

// The engineer's shell changes are replayed: a sed revision times its new design, a cp back to the
// saved copy the best one; a Bash command that exits non-zero is a failed file call and changes
// nothing.
TEST(DesignReportTest, ShellChangesAreReplayed) {
  const agent::family::TaskSpec spec{"gemm_epilogue", {"relu"}};
  const std::string source = CudaTaskSource(spec);
  ASSERT_FALSE(source.empty());
  const std::string path = "kernels/gemm_epilogue.cu";
  auto bash = [&](const std::string& command) { return CallText("Bash", Json::object({{"command", Json(command)}})); };
  const std::string profile = CallText("Profile", Json::object());
  const std::string best = KernelOf(spec, {0, 1, 2, 0}), other = KernelOf(spec, {1, 1, 2, 0});
  const std::optional<std::string> sed = agent::SedForDesignChange(path, best, other);
  ASSERT_TRUE(sed.has_value());
  v1::Trajectory t;
  t.set_task_id("train/ge_relu_1024x512x2048");
  AddTurn(&t, v1::Turn::ASSISTANT, CallText("Write", Json::object({{"path", Json(path)}, {"content", Json(best)}})) + profile);
  AddTurn(&t, v1::Turn::TOOL, "Wrote " + path);
  AddTurn(&t, v1::Turn::TOOL, "Profile: OK");
  AddTurn(&t, v1::Turn::ASSISTANT, bash(absl::StrCat("cp ", path, " ", agent::kBestKernelCopy, " && ", *sed)) + profile);
  AddTurn(&t, v1::Turn::TOOL, "exit status 0\n");
  AddTurn(&t, v1::Turn::TOOL, "Profile: OK");
  AddTurn(&t, v1::Turn::ASSISTANT, bash("sed -i -e 's/^#define GEMM .*/#define GEMM 2/' kernels/missing.cu") + profile);
  AddTurn(&t, v1::Turn::TOOL, "exit status 2\nsed: can't read kernels/missing.cu: No such file or directory\n");
  AddTurn(&t, v1::Turn::TOOL, "Profile: OK");
  AddTurn(&t, v1::Turn::ASSISTANT, bash(absl::StrCat("cp ", agent::kBestKernelCopy, " ", path)) + profile);
  AddTurn(&t, v1::Turn::TOOL, "exit status 0\n");
  AddTurn(&t, v1::Turn::TOOL, "Profile: OK");
  const TrajectoryFacts f = Facts(t, source, "cuda");
  EXPECT_EQ(f.failed_file_calls, 1);
  EXPECT_EQ(f.profiles, 4);
  EXPECT_EQ(f.revisions, 3);
  EXPECT_EQ(f.revisions_changed_design, 2) << "0120 -> 1120 -> 1120 -> 0120";
  EXPECT_EQ(f.design, "0120");
}

// A rollout whose kernel passed (a verdict paid more than 0) and that ended paid below 0 is counted:
// the revision that broke a passing kernel, which the paper's final-kernel metrics pay for.
TEST(DesignReportTest, ARolloutThatPassedThenEndedFailingIsCounted) {
  const agent::family::TaskSpec spec{"gemm_epilogue", {"relu"}};
  const std::string source = CudaTaskSource(spec);
  ASSERT_FALSE(source.empty());
  auto rollout = [](std::vector<double> paid) {
    v1::Trajectory t;
    t.set_task_id("train/ge_relu_1024x512x2048");
    for (double r : paid) {
      AddTurn(&t, v1::Turn::ASSISTANT, CallText("Profile", Json::object()));
      AddTurn(&t, v1::Turn::TOOL, r > 0 ? "Profile: OK" : "Profile: WRONG_ANSWER");
      t.mutable_turns(t.turns_size() - 1)->mutable_verdict()->set_reward(r);
    }
    t.set_reward(paid.back());
    *t.mutable_final_verdict() = t.turns(t.turns_size() - 1).verdict();
    return t;
  };
  std::vector<TrajectoryFacts> facts;
  for (const auto& paid : std::vector<std::vector<double>>{{1, 2, -1}, {2, -1, 1}, {-1, -1}, {1, 2}}) {
    facts.push_back(Facts(rollout(paid), source, "cuda"));
  }
  EXPECT_TRUE(facts[0].passed_then_failed);
  EXPECT_FALSE(facts[1].passed_then_failed) << "it ended passing";
  EXPECT_FALSE(facts[2].passed_then_failed) << "it never passed";
  EXPECT_FALSE(facts[3].passed_then_failed);
  const Json model = *FindJson(*FindJson(Summarise(facts, 10), "by_source"), "model");
  EXPECT_EQ(JsonNumber(*FindJson(model, "passed_then_failed")), 1);
}

// Every rendering of every composition with pointwise ops has its op lines, at either precision;
// the first rendering of a composition of the family with other pointwise ops does not (a row
// reduction is not an op line: softmax-scale and log_softmax-scale share theirs).
TEST(DesignReportTest, OpLinesAreRightInEveryRenderingOfTheTaskOnly) {
  for (const char* device : {"cuda", "cpu"}) {
    std::map<std::string, std::vector<std::pair<agent::family::TaskSpec, std::string>>> by_family;
    std::set<std::string> seen;
    int checked = 0;
    for (const auto& ft : data::family::MakeTasks(device)) {
      if (agent::family::PointwiseOps(ft.spec).empty() ||
          !seen.insert(ft.spec.family + ":" + absl::StrJoin(ft.spec.ops, ",")).second) {
        continue;
      }
      for (const auto& c : agent::family::AllChoices(*agent::family::Slots(ft.spec.family))) {
        auto files = agent::family::Render(ft.spec, c, device);
        ASSERT_TRUE(files.ok()) << files.status();
        EXPECT_TRUE(OpLinesRight(ft.spec, files->at(agent::KernelPathOf(*files))))
            << device << " " << ft.id << " " << agent::family::ChoiceDigits(c);
        ++checked;
      }
      auto first = agent::family::Render(ft.spec, {}, device);
      ASSERT_TRUE(first.ok()) << first.status();
      by_family[ft.spec.family].push_back({ft.spec, first->at(agent::KernelPathOf(*first))});
    }
    EXPECT_GT(checked, 500) << device;
    for (const auto& [family, kernels] : by_family) {
      for (const auto& [spec, kernel] : kernels) {
        for (const auto& [other, other_kernel] : kernels) {
          if (agent::family::PointwiseOps(other) == agent::family::PointwiseOps(spec)) continue;
          EXPECT_FALSE(OpLinesRight(spec, other_kernel)) << device << " " << family << ": "
              << absl::StrJoin(spec.ops, ",") << " read right in " << absl::StrJoin(other.ops, ",") << "'s kernel";
        }
      }
    }
  }
}

// Per task, what each of the model's designs earned: whether the reward tells them apart, and
// the speed-ups behind it (medians over the profiled verdicts only; the engineer's left out).
TEST(DesignReportTest, DesignsByTaskSayWhatEachDesignEarned) {
  auto fact = [](std::string task, std::string design, double reward, double xe, double xc, std::string source) {
    TrajectoryFacts f;
    f.task_id = std::move(task), f.design = std::move(design), f.source = std::move(source);
    f.family = "rowreduce", f.reward = f.verdict_reward = reward;
    f.speedup_vs_eager = xe, f.speedup_vs_compile = xc;
    return f;
  };
  const std::vector<TrajectoryFacts> facts = {
      fact("train/rr_softmax_1024x8192", "2100", 3, 1.6, 1.2, "model"),
      fact("train/rr_softmax_1024x8192", "2100", 3, 1.5, 1.1, "model"),
      fact("train/rr_softmax_1024x8192", "2100", 2, 1.7, 1.0, "model"),
      fact("train/rr_softmax_1024x8192", "1110", -1, 0, 0, "model"),  // WRONG_ANSWER: not profiled.
      fact("train/rr_softmax_1024x8192", "1110", 1, 0.8, 0.5, "model"),
      fact("train/rr_softmax_1024x8192", "1110", 3, 2.0, 2.0, "engineer"),
      fact("train/rr_softmax_4096x1024", "1110", 2, 1.1, 0.9, "model"),
  };
  const Json s = Summarise(facts, 10);
  const Json* tasks = FindJson(s, "designs_by_task");
  ASSERT_NE(tasks, nullptr);
  EXPECT_EQ(tasks->size(), 2u);
  const Json& block = *FindJson(*FindJson(*tasks, "train/rr_softmax_1024x8192"), "2100");
  EXPECT_EQ(JsonNumber(*FindJson(block, "n")), 3);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(block, "reward_mean")), 8.0 / 3);
  EXPECT_EQ(JsonNumber(*FindJson(block, "reward_max")), 3);
  EXPECT_EQ(JsonNumber(*FindJson(*FindJson(block, "rewards"), "3")), 2);
  EXPECT_EQ(JsonNumber(*FindJson(*FindJson(block, "rewards"), "2")), 1);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(block, "speedup_vs_eager_median")), 1.6);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(block, "speedup_vs_compile_median")), 1.1);
  const Json& warp = *FindJson(*FindJson(*tasks, "train/rr_softmax_1024x8192"), "1110");
  EXPECT_EQ(JsonNumber(*FindJson(warp, "n")), 2) << "the engineer's trajectory is not the model's";
  EXPECT_EQ(JsonNumber(*FindJson(warp, "reward_max")), 1);
  EXPECT_EQ(JsonNumber(*FindJson(warp, "profiled")), 1);
  EXPECT_DOUBLE_EQ(JsonNumber(*FindJson(warp, "speedup_vs_compile_median")), 0.5);
}

// A critic that knew the task, the first design, the final design: four trajectories of one task
// whose design decides the reward (01 pays 3, 20 pays 1), then one that revised from 20 to 01.
TEST(DesignReportTest, ValueCeilingByWhatTheCriticKnows) {
  auto traj = [](const std::string& id, double reward, std::vector<TrajectoryFacts::DesignSpan> spans) {
    TrajectoryFacts f;
    f.id = id;
    f.task_id = "train/t1";
    f.reward = reward;
    f.design = spans.back().design;
    f.design_spans = std::move(spans);
    return f;
  };
  std::vector<TrajectoryFacts> facts = {traj("a", 3, {{"", 1}, {"01", 9}}), traj("b", 3, {{"", 1}, {"01", 9}}),
                                        traj("c", 1, {{"", 1}, {"20", 9}}), traj("d", 1, {{"", 1}, {"20", 9}})};
  Json v = ValueCeiling(facts);
  const Json& loo = *FindJson(v, "leave_one_out");
  // By task: a is valued (3 + 1 + 1) / 3 by the others, c (3 + 3 + 1) / 3; residuals 4/3 each against
  // a variance of 1 each: 1 - 16/9.
  EXPECT_NEAR(JsonNumber(*FindJson(loo, "task")), 1 - 16.0 / 9, 1e-12);
  EXPECT_NEAR(JsonNumber(*FindJson(loo, "first_design")), 1, 1e-12);
  EXPECT_NEAR(JsonNumber(*FindJson(loo, "final_design")), 1, 1e-12);
  // By token: the one token before each kernel valued by the task (residual 16/9), the other 9 by the
  // final design (0), against 40 tokens of variance 1.
  EXPECT_NEAR(JsonNumber(*FindJson(loo, "by_token")), 1 - 4 * 16.0 / 9 / 40, 1e-12);
  EXPECT_EQ(JsonNumber(*FindJson(*FindJson(loo, "keys"), "first_design")), 2);
  EXPECT_NEAR(JsonNumber(*FindJson(*FindJson(v, "in_sample"), "task")), 0, 1e-12);

  // A revision: e's first design (20) is c's and d's, its final (01) a's and b's. Its first span's
  // tokens are valued as 20's (1, against its 3), the rest as 01's (3).
  facts.push_back(traj("e", 3, {{"", 1}, {"20", 4}, {"01", 5}}));
  v = ValueCeiling(facts);
  const Json& loo2 = *FindJson(v, "leave_one_out");
  const double mean = 11.0 / 5, tot = 3 * (3 - mean) * (3 - mean) + 2 * (1 - mean) * (1 - mean);
  // First design: e is valued by c and d (1): residual 4; the others by their pairs... a by b (3), c by
  // d and e (2): residual 1 each for c and d.
  EXPECT_NEAR(JsonNumber(*FindJson(loo2, "first_design")), 1 - (4 + 1 + 1) / tot, 1e-12);
  // Final design: e by a and b (3), a by b and e (3), c by d (1): no residual.
  EXPECT_NEAR(JsonNumber(*FindJson(loo2, "final_design")), 1, 1e-12);
  // A lone trajectory, or none: no figures to give.
  EXPECT_EQ(FindJson(ValueCeiling({facts[0]}), "leave_one_out"), nullptr);
}

}  // namespace
}  // namespace kernelrl::codemodel
