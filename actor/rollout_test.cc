// The agent loop without a network: the scripted policy against an
// in-process evaluator, malformed replies, and each budget.
#include "actor/rollout.h"

#include <filesystem>
#include <mutex>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "actor/test_support.h"
#include "actor/workspace.h"
#include "agent/chat/tool_calls.h"
#include "agent/chat/tools.h"
#include "agent/trajectory_builder.h"
#include "common/file.h"
#include "gtest/gtest.h"

namespace kernelrl::actor {
namespace {

using testing::FakeEvaluator;
using testing::Kit;

// A policy from a function of the request (for malformed replies and failures).
class FnPolicy final : public agent::PolicyClient {
 public:
  explicit FnPolicy(std::function<absl::StatusOr<std::string>(const agent::PolicyRequest&)> fn)
      : fn_(std::move(fn)) {}
  absl::StatusOr<agent::PolicyResponse> Generate(const agent::PolicyRequest& r) override {
    absl::StatusOr<std::string> text = fn_(r);
    if (!text.ok()) return text.status();
    agent::PolicyResponse out;
    out.ids = Kit().tokenizer->Encode(*text);
    out.ids.push_back(Kit().plain->im_end_id());
    out.logprobs.assign(out.ids.size(), -0.25f);
    out.policy_version = 3;
    return out;
  }

 private:
  std::function<absl::StatusOr<std::string>(const agent::PolicyRequest&)> fn_;
};

v1::Task CpuTask() {
  v1::Task t;
  t.set_id("cpu/relu");
  t.set_reference_source(*ReadFileToString("sandbox/testdata/cpu_tasks/relu.py"));
  return t;
}

RolloutDeps Deps(agent::PolicyClient* p, EvaluationClient* e) {
  return RolloutDeps{p, e, Kit().tokenizer.get(), &*Kit().with_tools, &*Kit().plain};
}

TEST(RolloutTest, ScriptedPolicyWritesCompilesVerifiesProfilesAndSubmits) {
  std::mt19937 rng(std::random_device{}());
  const double speedup = 1.0 + (rng() % 1000) / 100.0;
  FakeEvaluator eval([&](const v1::EvaluateRequest& r) {
    v1::Verdict v;
    v.set_outcome(v1::Verdict::OK);
    v.set_reward(r.skip_profile() ? 1 : 3);
    if (!r.skip_profile()) {
      v.set_speedup_vs_compile(speedup);
      v.set_speedup_vs_eager(speedup * 1.5);
    }
    return v;
  });
  agent::ScriptedPolicy policy("sandbox/solutions", 42, Kit().tokenizer.get(), Kit().plain->im_end_id());
  const std::string skill = *ReadFileToString("sandbox/SKILL.md");
  v1::RolloutConfig config = testing::TestRolloutConfig("rollout_scripted");
  RolloutRunner runner(Deps(&policy, &eval), config, skill);
  RolloutOptions opts;
  opts.trajectory_id = "traj-" + std::to_string(rng());
  opts.job_id = "job-1";
  absl::StatusOr<RolloutResult> r = runner.Run(CpuTask(), opts);
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::Trajectory& t = r->trajectory;
  EXPECT_EQ(t.stats().stop_reason(), "submitted");
  EXPECT_EQ(t.id(), opts.trajectory_id);
  EXPECT_EQ(t.task_id(), "cpu/relu");
  EXPECT_EQ(t.job_id(), "job-1");
  EXPECT_EQ(t.policy_version(), 42);
  // Compile, Verify, Profile; the final evaluation reuses Profile (same files).
  const std::vector<v1::EvaluateRequest> reqs = eval.requests();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_TRUE(reqs[0].skip_profile());
  EXPECT_TRUE(reqs[1].skip_profile());
  EXPECT_FALSE(reqs[2].skip_profile());
  // The sandbox got exactly the solution's files, never model.py or SKILL.md.
  std::vector<std::string> sent;
  for (const auto& f : reqs[2].workspace().files()) {
    sent.push_back(f.path());
    EXPECT_EQ(f.content(), *ReadFileToString("sandbox/solutions/cpu/relu/" + f.path())) << f.path();
  }
  EXPECT_EQ(sent, (std::vector<std::string>{"kernels/relu.cc", "model_new.py"}));
  EXPECT_EQ(reqs[2].task().reference_source(), CpuTask().reference_source());
  EXPECT_EQ(t.reward(), 3);
  EXPECT_DOUBLE_EQ(r->best_verdict.speedup_vs_compile(), speedup);
  EXPECT_EQ(t.stats().num_evaluations(), 3);
  // Turns: system, task, then (assistant, tool results...) x5 and the closing reply.
  std::vector<std::string> tools;
  for (const v1::Turn& turn : t.turns()) {
    if (turn.role() == v1::Turn::TOOL) tools.push_back(turn.tool_name());
  }
  EXPECT_EQ(tools, (std::vector<std::string>{"Read", "Write", "Write", "Compile", "Verify", "Profile"}));
  EXPECT_EQ(t.turns(t.turns_size() - 1).role(), v1::Turn::ASSISTANT);
  EXPECT_TRUE(absl::StrContains(t.turns(3).content(), "class Model"));  // The Read observation.
  EXPECT_EQ(t.turns(2).tool_name(), "Read");  // One call: named on the assistant turn too.
  EXPECT_TRUE(t.turns(4).tool_name().empty());  // Two calls: only on the tool turns.
  // Token-in/token-out: ids, mask and log-probs equal the full rendering of the history.
  EXPECT_EQ(t.token_ids_size(), t.loss_mask_size());
  EXPECT_EQ(t.token_ids_size(), t.logprobs_size());
  int trained = 0;
  for (int i = 0; i < t.loss_mask_size(); ++i) trained += t.loss_mask(i);
  EXPECT_EQ(trained, t.stats().num_generated_tokens());
  EXPECT_GT(r->policy_seconds, 0);
  // The workspace is gone.
  EXPECT_TRUE(std::filesystem::is_empty(config.workspace_root()));
}

// An INFRA_ERROR says nothing about the code: a Profile the sandbox could not judge does not stand
// as the trajectory's verdict; the final workspace is judged again, final_infra_retries times at most.
TEST(RolloutTest, AnUnjudgedProfileIsJudgedAgainAtTheEnd) {
  std::mt19937 rng(std::random_device{}());
  for (const int retries : {0, 1, 2}) {
    const int unjudged = 1 + static_cast<int>(rng() % 2);  // the Profile's, then the final's first (if 2)
    int profiles = 0;
    FakeEvaluator eval([&](const v1::EvaluateRequest& r) {
      v1::Verdict v;
      v.set_outcome(v1::Verdict::OK);
      v.set_reward(1);
      if (!r.skip_profile() && profiles++ < unjudged) {
        v.set_outcome(v1::Verdict::INFRA_ERROR);
        v.set_reward(0);
      } else if (!r.skip_profile()) {
        v.set_reward(3);
      }
      return v;
    });
    agent::ScriptedPolicy policy("sandbox/solutions", 1, Kit().tokenizer.get(), Kit().plain->im_end_id());
    v1::RolloutConfig config = testing::TestRolloutConfig("rollout_unjudged");
    config.set_final_infra_retries(retries);
    RolloutRunner runner(Deps(&policy, &eval), config, *ReadFileToString("sandbox/SKILL.md"));
    RolloutOptions opts;
    opts.trajectory_id = "traj-" + std::to_string(rng());
    absl::StatusOr<RolloutResult> r = runner.Run(CpuTask(), opts);
    ASSERT_TRUE(r.ok()) << r.status();
    // The agent's Profile, then the final ones: the first final, and a retry while unjudged.
    const int finals = std::min(retries + 1, unjudged);
    const bool judged = unjudged - 1 < retries + 1;
    SCOPED_TRACE(absl::StrCat("retries ", retries, ", unjudged ", unjudged));
    const std::vector<v1::EvaluateRequest> reqs = eval.requests();
    ASSERT_EQ(reqs.size(), 3u + finals);
    for (int k = 0; k < finals; ++k) {
      EXPECT_EQ(reqs[3 + k].request_id(), opts.trajectory_id + "/final" + (k > 0 ? absl::StrCat("-", k) : ""));
      EXPECT_EQ(reqs[3 + k].workspace().SerializeAsString(), reqs[2].workspace().SerializeAsString());
    }
    EXPECT_EQ(r->trajectory.final_verdict().outcome(), judged ? v1::Verdict::OK : v1::Verdict::INFRA_ERROR);
    EXPECT_EQ(r->trajectory.reward(), judged ? 3 : 0);
    EXPECT_EQ(r->trajectory.stats().num_evaluations(), 3 + finals);
  }
}

// Turn t asks the policy with the rollout's seed + t, and the trajectory says which seed it had.
TEST(RolloutTest, EachTurnAsksWithTheRolloutsSeedPlusItsIndex) {
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t seed = rng() >> 1 | 1;
  std::vector<uint64_t> asked;
  FnPolicy policy([&](const agent::PolicyRequest& r) -> absl::StatusOr<std::string> {
    asked.push_back(r.seed);
    return agent::FormatToolCall("Read", Json::object({{"path", Json("model.py")}}));
  });
  FakeEvaluator eval([](const v1::EvaluateRequest&) { return v1::Verdict(); });
  v1::RolloutConfig config = testing::TestRolloutConfig("rollout_seed");
  config.set_max_turns(3);
  config.set_final_evaluation(false);
  RolloutRunner runner(Deps(&policy, &eval), config, "skill");
  RolloutOptions opts;
  opts.trajectory_id = "traj-seed";
  opts.seed = seed;
  auto r = runner.Run(CpuTask(), opts);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(asked.size(), 3u);  // Three turns, each a Read.
  for (size_t t = 0; t < asked.size(); ++t) EXPECT_EQ(asked[t], seed + t);
  EXPECT_EQ(r->trajectory.sampling().seed(), seed);
  asked.clear();
  opts.seed = 0;  // No seed: the policy draws, every turn.
  r = runner.Run(CpuTask(), opts);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(asked.size(), 3u);
  for (uint64_t s : asked) EXPECT_EQ(s, 0u);
  EXPECT_EQ(r->trajectory.sampling().seed(), 0u);
}

TEST(RolloutTest, MalformedRepliesBecomeErrorObservationsUntilMaxTurns) {
  FakeEvaluator eval([](const v1::EvaluateRequest&) { return v1::Verdict(); });
  const std::vector<std::string> bad = {
      "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": ",          // cut off
      "<tool_call>{\"name\": \"bash\", \"arguments\": {}}</tool_call>",           // unknown tool
      "<tool_call>{\"name\": \"Edit\", \"arguments\": {\"path\": 1}}</tool_call>",  // mistyped
      "</tool_call>",                                                              // stray close
  };
  FnPolicy policy([&](const agent::PolicyRequest& r) -> absl::StatusOr<std::string> { return bad[r.turn % bad.size()]; });
  v1::RolloutConfig config = testing::TestRolloutConfig("rollout_malformed");
  config.set_max_turns(6);
  config.set_final_evaluation(false);
  RolloutRunner runner(Deps(&policy, &eval), config, "");
  absl::StatusOr<RolloutResult> r = runner.Run(CpuTask(), RolloutOptions{false, "t-bad", "", 0});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->trajectory.stats().stop_reason(), "max_turns");
  EXPECT_EQ(r->tool_errors.at("parse"), 6);
  EXPECT_EQ(r->trajectory.reward(), -1);
  std::vector<std::string> errors;
  for (const v1::Turn& t : r->trajectory.turns()) {
    if (t.role() == v1::Turn::TOOL) errors.push_back(t.content());
  }
  ASSERT_EQ(errors.size(), 6u);
  EXPECT_TRUE(absl::StrContains(errors[0], "cut off")) << errors[0];
  EXPECT_TRUE(absl::StrContains(errors[1], "unknown tool \"bash\"")) << errors[1];
  EXPECT_TRUE(absl::StrContains(errors[2], "\"path\" must be a string")) << errors[2];
  EXPECT_TRUE(absl::StrContains(errors[3], "without an opening")) << errors[3];
  EXPECT_TRUE(eval.requests().empty());
}

TEST(RolloutTest, RepliesThatKeepBreakingTheSchemaEndTheRolloutWhenConfigured) {
  FakeEvaluator eval([](const v1::EvaluateRequest&) { return v1::Verdict(); });
  const std::string broken = "<tool_call>\n{\"name\": \"arguments\": {}}\n</tool_call>";
  const std::string read = "<tool_call>\n{\"name\": \"Read\", \"arguments\": {\"path\": \"model.py\"}}\n</tool_call>";
  // Turns: broken, read (resets the count), broken, broken -> ends after turn 4 of 10.
  FnPolicy policy([&](const agent::PolicyRequest& r) -> absl::StatusOr<std::string> { return r.turn == 1 ? read : broken; });
  v1::RolloutConfig config = testing::TestRolloutConfig("rollout_parse_errors");
  config.set_max_turns(10);
  config.set_final_evaluation(false);
  config.set_max_consecutive_parse_errors(2);
  RolloutRunner runner(Deps(&policy, &eval), config, "");
  absl::StatusOr<RolloutResult> r = runner.Run(CpuTask(), RolloutOptions{false, "t-parse", "", 0});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->trajectory.stats().stop_reason(), "parse_errors");
  EXPECT_EQ(r->tool_errors.at("parse"), 3);
  int assistant = 0;
  for (const v1::Turn& t : r->trajectory.turns()) assistant += t.role() == v1::Turn::ASSISTANT;
  EXPECT_EQ(assistant, 4);
}

TEST(RolloutTest, TheSystemPromptAnnouncesTheToolSchemas) {
  FakeEvaluator eval([](const v1::EvaluateRequest&) { return v1::Verdict(); });
  std::vector<std::vector<int32_t>> prompts;
  std::mutex mu;
  auto record = [&](const agent::PolicyRequest& r) -> absl::StatusOr<std::string> {
    std::lock_guard<std::mutex> l(mu);
    prompts.push_back(r.prompt_ids);
    return std::string("done");
  };
  FnPolicy policy(record);
  v1::RolloutConfig config = testing::TestRolloutConfig("rollout_schemas");
  config.set_max_turns(1);
  config.set_final_evaluation(false);
  RolloutRunner runner(Deps(&policy, &eval), config, "");
  ASSERT_TRUE(runner.Run(CpuTask(), RolloutOptions{false, "t-schemas", "", 0}).ok());
  ASSERT_EQ(prompts.size(), 1u);
  const std::string a = Kit().tokenizer->Decode(prompts[0]);
  for (const std::string& tool : agent::ToolNames()) {
    EXPECT_TRUE(absl::StrContains(a, "\"name\": \"" + tool + "\"")) << tool << "\n" << a.substr(0, 400);
  }
  EXPECT_TRUE(absl::StrContains(a, "Task relu."));
}

TEST(RolloutTest, TheTaskLineEndsThePromptAfterTheSkill) {
  FakeEvaluator eval([](const v1::EvaluateRequest&) { return v1::Verdict(); });
  FnPolicy quiet([](const agent::PolicyRequest&) -> absl::StatusOr<std::string> { return std::string(); });
  RolloutRunner runner(Deps(&quiet, &eval), testing::TestRolloutConfig("rollout_prompt"), "# Skill\nslot list\n");
  const std::string p = runner.TaskPrompt(CpuTask());
  EXPECT_TRUE(absl::EndsWith(p, "Task relu.\n")) << p;  // The name, not the collection "cpu/".
  EXPECT_LT(p.find("slot list"), p.find("Task relu")) << p;
  v1::RolloutConfig omit = testing::TestRolloutConfig("rollout_prompt");
  omit.set_omit_skill_from_prompt(true);
  RolloutRunner short_prompt(Deps(&quiet, &eval), omit, "# Skill\nslot list\n");
  EXPECT_EQ(short_prompt.TaskPrompt(CpuTask()).find("slot list"), std::string::npos);
  EXPECT_TRUE(absl::EndsWith(short_prompt.TaskPrompt(CpuTask()), "Task relu.\n"));
  v1::Task kb = CpuTask();
  kb.set_id("level1/19_ReLU");
  kb.set_level(1);
  EXPECT_TRUE(absl::EndsWith(short_prompt.TaskPrompt(kb), "Task 19_ReLU (KernelBench level 1).\n"));
}

TEST(RolloutTest, ToolSchemasCanStayOutOfThePromptAndTheToolsStillWork) {
  FakeEvaluator eval([](const v1::EvaluateRequest&) { return v1::Verdict(); });
  std::vector<std::string> prompts;
  const std::string path = "notes-" + std::to_string(std::random_device{}() % 100000) + ".txt";
  FnPolicy writer([&](const agent::PolicyRequest& r) -> absl::StatusOr<std::string> {
    prompts.push_back(Kit().tokenizer->Decode(r.prompt_ids));
    if (r.turn > 0) return std::string();
    return agent::FormatToolCall("Write", Json::object({{"path", Json(path)}, {"content", Json("x")}}));
  });
  for (const bool omit : {false, true}) {
    prompts.clear();
    v1::RolloutConfig config = testing::TestRolloutConfig("rollout_schemas");
    config.set_final_evaluation(false);
    config.set_omit_tool_schemas_from_prompt(omit);
    RolloutRunner runner(Deps(&writer, &eval), config, "");
    auto r = runner.Run(CpuTask(), RolloutOptions{false, "t-schemas", "", 0});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(prompts.size(), 2u);
    EXPECT_EQ(absl::StrContains(prompts[0], "<tools>"), !omit) << prompts[0];
    EXPECT_EQ(absl::StrContains(prompts[0], "\"name\": \"Profile\""), !omit);
    EXPECT_TRUE(absl::StrContains(prompts[1], "wrote " + path)) << prompts[1];  // The call ran either way.
    // The token ids are the whole rendering of what the policy saw, whichever system turn it was.
    EXPECT_EQ(Kit().tokenizer->Decode({r->trajectory.token_ids().begin(), r->trajectory.token_ids().end()})
                  .find(prompts[1].substr(0, prompts[1].size() - 40)),
              0u);
  }
}

TEST(RolloutTest, BudgetsEndTheRollout) {
  FakeEvaluator eval([](const v1::EvaluateRequest&) { return v1::Verdict(); });
  FnPolicy chatty([](const agent::PolicyRequest&) -> absl::StatusOr<std::string> {
    return agent::FormatToolCall("TodoWrite", *ParseJson(R"({"todos": [{"content": "think", "status": "pending"}]})"));
  });
  {  // Context: room for the prompt and about two rounds.
    v1::RolloutConfig config = testing::TestRolloutConfig("rollout_budget");
    config.set_final_evaluation(false);
    RolloutRunner probe(Deps(&chatty, &eval), config, "");
    agent::TrajectoryBuilder b(&*Kit().with_tools, &*Kit().plain, Kit().tokenizer.get());
    ASSERT_TRUE(b.Start(probe.SystemPrompt(), probe.TaskPrompt(CpuTask())).ok());
    config.set_context_tokens(b.prompt_length() + 120);
    RolloutRunner runner(Deps(&chatty, &eval), config, "");
    auto r = runner.Run(CpuTask(), RolloutOptions{false, "t-ctx", "", 0});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->trajectory.stats().stop_reason(), "max_tokens");
    EXPECT_GE(r->tool_calls["TodoWrite"], 1);
    EXPECT_LT(r->tool_calls["TodoWrite"], 5);
  }
  {  // Evaluation uses eval_max_turns.
    v1::RolloutConfig config = testing::TestRolloutConfig("rollout_budget");
    config.set_max_turns(2);
    config.set_eval_max_turns(3);
    config.set_final_evaluation(false);
    RolloutRunner runner(Deps(&chatty, &eval), config, "");
    auto r = runner.Run(CpuTask(), RolloutOptions{true, "t-eval", "", 0});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->trajectory.stats().stop_reason(), "max_turns");
    EXPECT_EQ(r->tool_calls.at("TodoWrite"), 3);
  }
  {  // Wall time.
    v1::RolloutConfig config = testing::TestRolloutConfig("rollout_budget");
    config.set_wall_seconds(0.3);
    config.set_final_evaluation(false);
    FnPolicy slow([](const agent::PolicyRequest&) -> absl::StatusOr<std::string> {
      return agent::FormatToolCall("Bash", *ParseJson(R"({"command": "sleep 0.2"})"));
    });
    RolloutRunner runner(Deps(&slow, &eval), config, "");
    auto r = runner.Run(CpuTask(), RolloutOptions{false, "t-wall", "", 0});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->trajectory.stats().stop_reason(), "wall_time");
  }
  {  // A policy failure.
    FnPolicy down([](const agent::PolicyRequest&) -> absl::StatusOr<std::string> {
      return absl::UnavailableError("policy server gone");
    });
    RolloutRunner runner(Deps(&down, &eval), testing::TestRolloutConfig("rollout_budget"), "");
    auto r = runner.Run(CpuTask(), RolloutOptions{false, "t-err", "", 0});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->trajectory.stats().stop_reason(), "error");
    EXPECT_TRUE(absl::StrContains(r->error, "policy server gone"));
  }
}

// The attack: a rollout's Bash reads another rollout of the same actor (the same task's group, its
// kernels and its control files), one that was there when its shell started or one made after.
// Neither is reachable; its own workspace stays readable and writable.
TEST(RolloutTest, ItsShellSeesNoOtherRollout) {
  v1::RolloutConfig config = testing::TestRolloutConfig("rollout_siblings");
  config.set_final_evaluation(false);
  std::mt19937 rng(std::random_device{}());
  const std::string secret_before = absl::StrCat("before", rng()), secret_after = absl::StrCat("after", rng());
  auto before = RolloutWorkspace::Create(config.workspace_root(), "# " + secret_before + "\n", "");
  ASSERT_TRUE(before.ok()) << before.status();
  std::unique_ptr<RolloutWorkspace> after;
  std::vector<std::string> seen;
  std::string own_name;
  FnPolicy policy([&](const agent::PolicyRequest& r) -> absl::StatusOr<std::string> {
    if (r.turn > 0) seen.push_back(r.history->back().content);
    std::string command;
    if (r.turn == 0) {
      for (const auto& e : std::filesystem::directory_iterator(config.workspace_root())) {  // As the actor sees it.
        if (e.path() != (*before)->rollout_dir()) own_name = e.path().filename().string();
      }
      command = absl::StrCat("echo mine > own.txt && cat own.txt; ls -A ../..; ls -A ..; cat ", (*before)->dir(),
                             "/model.py; ls ", (*before)->control_dir(), "; echo end");
    } else if (r.turn == 1) {  // Made while this rollout's shell runs.
      auto made = RolloutWorkspace::Create(config.workspace_root(), "# " + secret_after + "\n", "");
      if (!made.ok()) return made.status();
      after = *std::move(made);
      command = absl::StrCat("ls -A ../..; cat ", after->dir(), "/model.py; cat ../../*/ws/model.py; echo end");
    } else {
      return std::string("done");
    }
    Json args = Json::object();
    args["command"] = command;
    return agent::FormatToolCall("Bash", args);
  });
  FakeEvaluator eval([](const v1::EvaluateRequest&) { return v1::Verdict(); });
  RolloutRunner runner(Deps(&policy, &eval), config, "");
  auto r = runner.Run(CpuTask(), RolloutOptions{false, "t-siblings", "", 0});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(seen.size(), 2u) << r->trajectory.stats().stop_reason();
  const std::string before_name = std::filesystem::path((*before)->rollout_dir()).filename().string();
  const std::string after_name = std::filesystem::path(after->rollout_dir()).filename().string();
  // The listings show this rollout alone (its workspace alone, not its control files); the other
  // rollouts are named only where this shell was refused them.
  for (const std::string& out : seen) {
    EXPECT_FALSE(absl::StrContains(out, secret_before)) << out;
    EXPECT_FALSE(absl::StrContains(out, secret_after)) << out;
    for (absl::string_view line : absl::StrSplit(out, '\n')) {
      for (const std::string& other : {before_name, after_name, std::string("ctl")}) {
        if (absl::StrContains(line, other)) EXPECT_TRUE(absl::StrContains(line, "No such file")) << line;
      }
    }
  }
  EXPECT_TRUE(absl::StrContains(seen[0], "mine\n" + own_name + "\nws\n")) << seen[0];
  EXPECT_TRUE(absl::StartsWith(seen[1], "exit status 0\n" + own_name + "\n")) << seen[1];
}

}  // namespace
}  // namespace kernelrl::actor
