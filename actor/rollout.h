// RolloutRunner: the ReAct agent loop of one rollout, as a plain class that
// tests drive without a network.
//
//   system prompt + task + SKILL.md -> policy -> parse tool calls -> run each
//   tool in the rollout's workspace -> observations -> policy -> ...
//
// until the agent replies without a tool call ("submitted"), or max turns,
// the context budget ("max_tokens") or the wall budget ("wall_time") ends it;
// a policy failure ends it with "error". Then, with final_evaluation, the
// final workspace is profiled (skipped when the last Profile saw the same
// files and judged them; an INFRA_ERROR is tried again, final_infra_retries
// times) and its reward is the trajectory's.
//
// The trajectory is token-in/token-out (agent/trajectory_builder.h). A
// malformed reply is answered with the parser's error as a tool turn; every
// tool failure is an observation, never an exception.
// Thread-safe: Run() may be called concurrently (each call owns its
// workspace, shell and builder); the dependencies must be thread-safe.
#ifndef KERNELRL_ACTOR_ROLLOUT_H_
#define KERNELRL_ACTOR_ROLLOUT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actor/evaluation.h"
#include "agent/policy/policy.h"
#include "agent/chat/chat_format.h"
#include "agent/tokenizer/tokenizer.h"
#include "proto/actor_config.pb.h"
#include "proto/task.pb.h"
#include "proto/trajectory.pb.h"

namespace kernelrl::actor {

struct RolloutDeps {
  agent::PolicyClient* policy = nullptr;
  EvaluationClient* evaluator = nullptr;
  const agent::Tokenizer* tokenizer = nullptr;
  const agent::ChatFormat* with_tools = nullptr;  // Announces ToolSchemas().
  const agent::ChatFormat* plain = nullptr;       // No tools.
};

struct RolloutOptions {
  bool evaluation = false;  // eval_max_turns instead of max_turns.
  std::string trajectory_id;
  std::string job_id;
  uint64_t seed = 0;  // 0: the policy draws.
};

struct RolloutResult {
  v1::Trajectory trajectory;
  // Best-in-trajectory (the paper's evaluation protocol): the OK verdict with
  // the highest speed-up over torch.compile; else the final verdict.
  v1::Verdict best_verdict;
  double policy_seconds = 0;   // Inside PolicyClient::Generate.
  double sandbox_seconds = 0;  // Inside EvaluationClient::Evaluate.
  double wall_seconds = 0;
  std::map<std::string, int> tool_calls;   // By tool name ("parse" for malformed replies).
  std::map<std::string, int> tool_errors;
  std::string error;  // Set when stop_reason is "error".
};

class RolloutRunner {
 public:
  RolloutRunner(RolloutDeps deps, v1::RolloutConfig config, std::string skill_text);

  absl::StatusOr<RolloutResult> Run(const v1::Task& task, const RolloutOptions& options) const;

  std::string SystemPrompt() const;
  std::string TaskPrompt(const v1::Task& task) const;

 private:
  const RolloutDeps deps_;
  const v1::RolloutConfig config_;
  const std::string skill_text_;
};

}  // namespace kernelrl::actor

#endif  // KERNELRL_ACTOR_ROLLOUT_H_
