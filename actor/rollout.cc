#include "actor/rollout.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "actor/shell.h"
#include "actor/tools.h"
#include "actor/workspace.h"
#include "agent/chat/tool_calls.h"
#include "agent/trajectory_builder.h"
#include "profiler_service/reward.h"

namespace kernelrl::actor {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr char kDefaultSystemPrompt[] =
    "You are an expert GPU engineer. You make PyTorch models faster by replacing their computation with your "
    "own CUDA kernels, keeping the results correct. Work in the task workspace with the tools; compile, verify "
    "and profile through the Compile, Verify and Profile tools. When you are finished, reply without a tool call.";

bool Better(const v1::Verdict& a, const v1::Verdict& b) {  // a better than b?
  const bool a_ok = a.outcome() == v1::Verdict::OK, b_ok = b.outcome() == v1::Verdict::OK;
  if (a_ok != b_ok) return a_ok;
  if (!a_ok) return false;
  const bool a_prof = a.speedup_vs_compile() > 0, b_prof = b.speedup_vs_compile() > 0;
  if (a_prof != b_prof) return a_prof;
  return a.speedup_vs_compile() > b.speedup_vs_compile();
}

}  // namespace

RolloutRunner::RolloutRunner(RolloutDeps deps, v1::RolloutConfig config, std::string skill_text)
    : deps_(deps), config_(std::move(config)), skill_text_(std::move(skill_text)) {}

std::string RolloutRunner::SystemPrompt() const {
  return config_.system_prompt().empty() ? kDefaultSystemPrompt : config_.system_prompt();
}

// The task's own line comes last, after the general instructions and SKILL.md: it is what the
// reply depends on, and next to the reply a model (a small one trained from scratch above all)
// conditions on it without attending back over the whole skill text. It names the task without
// the collection in its id ("heldout/ew_relu_48x45" -> "ew_relu_48x45", "level1/19_ReLU" ->
// "19_ReLU (KernelBench level 1)"): a policy is not told which split a task is in, and a small
// model that only ever saw "train/..." here is thrown off by a prefix it never read.
std::string RolloutRunner::TaskPrompt(const v1::Task& task) const {
  std::string p =
      "The workspace holds model.py (the reference Model, frozen) and SKILL.md. Write model_new.py with a class "
      "ModelNew computed by your own kernels, make it pass Verify, then make it as fast as you can (Profile).\n";
  if (!skill_text_.empty() && !config_.omit_skill_from_prompt()) absl::StrAppend(&p, "\nSKILL.md:\n", skill_text_, "\n");
  const absl::string_view id = task.id();
  absl::StrAppend(&p, "Task ", id.substr(id.rfind('/') + 1),
                  task.level() > 0 ? absl::StrCat(" (KernelBench level ", task.level(), ")") : "", ".\n");
  return p;
}

absl::StatusOr<RolloutResult> RolloutRunner::Run(const v1::Task& task, const RolloutOptions& options) const {
  const auto start = Clock::now();
  RolloutResult result;
  absl::StatusOr<std::unique_ptr<RolloutWorkspace>> ws =
      RolloutWorkspace::Create(config_.workspace_root(), task.reference_source(), skill_text_);
  if (!ws.ok()) return ws.status();
  // The root of every rollout hidden, this one's workspace alone kept: the other rollouts, those
  // running when the shell starts and those made later, and this one's control files are not seen.
  ShellSession shell((*ws)->dir(), (*ws)->control_dir(),
                     {std::filesystem::path((*ws)->rollout_dir()).parent_path().string()}, config_.isolation(),
                     static_cast<size_t>(config_.tools().output_cap_bytes()));
  ToolRunner tools(ws->get(), &shell, deps_.evaluator, &task, config_.tools(), options.trajectory_id);
  agent::TrajectoryBuilder builder(config_.omit_tool_schemas_from_prompt() ? deps_.plain : deps_.with_tools, deps_.plain,
                                   deps_.tokenizer);
  if (absl::Status s = builder.Start(SystemPrompt(), TaskPrompt(task)); !s.ok()) return s;

  std::vector<v1::Verdict> verdicts;
  std::string last_profiled;  // Serialized snapshot the last OK-or-not Profile evaluated.
  v1::Verdict last_profile_verdict;
  std::string stop_reason;
  int max_turns = options.evaluation ? config_.eval_max_turns() : config_.max_turns();
  // The learner's recipe stages set a task's turn budget (single-turn warm-up: 1).
  if (auto it = task.metadata().find("max_turns"); it != task.metadata().end() && !options.evaluation) {
    if (const int m = std::atoi(it->second.c_str()); m > 0) max_turns = std::min(max_turns, m);
  }
  int parse_errors_in_a_row = 0;
  for (int turn = 0; turn < max_turns && stop_reason.empty(); ++turn) {
    if (config_.wall_seconds() > 0 && Since(start) > config_.wall_seconds()) {
      stop_reason = "wall_time";
      break;
    }
    const int64_t room = config_.context_tokens() - builder.prompt_length();
    if (room <= 0) {
      stop_reason = "max_tokens";
      break;
    }
    agent::PolicyRequest req;
    req.prompt_ids = builder.PromptIds();
    req.max_new_tokens = static_cast<int32_t>(std::min<int64_t>(room, config_.max_new_tokens_per_turn()));
    req.temperature = config_.temperature();
    req.top_p = config_.top_p();
    req.stop_ids = {deps_.plain->im_end_id()};
    req.seed = options.seed == 0 ? 0 : options.seed + static_cast<uint64_t>(turn);
    req.request_id = absl::StrCat(options.trajectory_id, "/turn-", turn);
    req.task_id = task.id();
    req.turn = turn;
    req.history = &builder.history();
    const auto t0 = Clock::now();
    absl::StatusOr<agent::PolicyResponse> sample = deps_.policy->Generate(req);
    result.policy_seconds += Since(t0);
    if (!sample.ok()) {
      stop_reason = "error";
      result.error = absl::StrCat("policy: ", sample.status().ToString());
      break;
    }
    absl::StatusOr<std::string> text =
        builder.AddAssistant(
        {std::move(sample->ids), std::move(sample->logprobs), sample->policy_version, std::move(sample->sampling)});
    if (!text.ok()) {
      stop_reason = "error";
      result.error = absl::StrCat("policy reply: ", text.status().ToString());
      break;
    }
    absl::StatusOr<std::vector<agent::ToolCall>> calls = agent::ParseToolCalls(*text);
    if (!calls.ok()) {
      ++result.tool_calls["parse"];
      ++result.tool_errors["parse"];
      if (absl::Status s = builder.AddToolResult("", "", absl::StrCat("Error: ", calls.status().message()), nullptr);
          !s.ok()) {
        return s;
      }
      if (++parse_errors_in_a_row == config_.max_consecutive_parse_errors()) stop_reason = "parse_errors";
      continue;
    }
    parse_errors_in_a_row = 0;
    if (calls->empty()) {
      stop_reason = "submitted";
      break;
    }
    if (calls->size() == 1) builder.SetAssistantCall((*calls)[0].name, (*calls)[0].arguments_json);
    for (const agent::ToolCall& call : *calls) {
      ++result.tool_calls[call.name];
      if (call.name == "Profile") last_profiled = (*ws)->Snapshot().SerializeAsString();
      ToolResult r = tools.Run(call.name, call.arguments);
      result.sandbox_seconds += r.sandbox_seconds;
      if (r.is_error) ++result.tool_errors[call.name];
      if (r.has_verdict) {
        verdicts.push_back(r.verdict);
        if (call.name == "Profile") last_profile_verdict = r.verdict;
      }
      if (absl::Status s = builder.AddToolResult(call.name, call.arguments_json, r.text,
                                                 r.has_verdict ? &r.verdict : nullptr);
          !s.ok()) {
        return s;
      }
    }
  }
  if (stop_reason.empty()) stop_reason = "max_turns";

  v1::Verdict final_verdict;
  bool has_final = false;
  if (config_.final_evaluation() && deps_.evaluator != nullptr) {
    const v1::Workspace snapshot = (*ws)->Snapshot();
    // The last Profile answers for these very files unless the sandbox could not judge them:
    // INFRA_ERROR says nothing about the code, so the workspace is judged again.
    if (!last_profiled.empty() && snapshot.SerializeAsString() == last_profiled &&
        last_profile_verdict.outcome() != v1::Verdict::INFRA_ERROR) {
      final_verdict = last_profile_verdict;
    } else {
      for (int attempt = 0;; ++attempt) {
        v1::EvaluateRequest req;
        *req.mutable_task() = task;
        *req.mutable_workspace() = snapshot;
        req.set_request_id(
            absl::StrCat(options.trajectory_id, "/final", attempt > 0 ? absl::StrCat("-", attempt) : ""));
        const auto t0 = Clock::now();
        final_verdict = deps_.evaluator->Evaluate(req);
        result.sandbox_seconds += Since(t0);
        verdicts.push_back(final_verdict);
        if (final_verdict.outcome() != v1::Verdict::INFRA_ERROR || attempt >= config_.final_infra_retries()) break;
      }
    }
    has_final = true;
  } else if (!verdicts.empty()) {
    final_verdict = verdicts.back();
    has_final = true;
  }

  result.trajectory = builder.Build();
  v1::Trajectory& t = result.trajectory;
  t.set_id(options.trajectory_id);
  t.set_task_id(task.id());
  t.set_job_id(options.job_id);
  if (t.has_sampling()) t.mutable_sampling()->set_seed(options.seed);
  if (has_final) *t.mutable_final_verdict() = final_verdict;
  // The worker set the verdict's reward; no verdict at all scores as an unspecified outcome.
  t.set_reward(has_final ? final_verdict.reward() : RewardFor(v1::Verdict()));
  t.mutable_stats()->set_num_evaluations(static_cast<int32_t>(verdicts.size()));
  t.mutable_stats()->set_stop_reason(stop_reason);
  result.wall_seconds = Since(start);
  t.mutable_stats()->set_wall_seconds(result.wall_seconds);
  t.mutable_stats()->set_policy_seconds(result.policy_seconds);
  t.mutable_stats()->set_sandbox_seconds(result.sandbox_seconds);
  result.best_verdict = final_verdict;
  for (const v1::Verdict& v : verdicts) {
    if (Better(v, result.best_verdict)) result.best_verdict = v;
  }
  return result;
}

}  // namespace kernelrl::actor
