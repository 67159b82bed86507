// ScriptedPolicy: replays a fixed action script, so CI and the GPU
// demonstration drive the whole agent loop deterministically. For a task
// whose solution directory exists (<dir>/<task id> or <dir>/<basename>):
//   turn 0  Read model.py
//   turn 1  Write every solution file (one reply, several calls)
//   turn 2  Compile      turn 3  Verify      turn 4  Profile
//   turn 5  a closing message without a call (the rollout is submitted)
// Without a solution it says so and submits at once. Replies are tokenized
// with the model's tokenizer and end with <|im_end|>; log-probs are a fixed
// function of position (not a model's), the version is configured.
#ifndef KERNELRL_AGENT_POLICY_SCRIPTED_POLICY_H_
#define KERNELRL_AGENT_POLICY_SCRIPTED_POLICY_H_

#include <string>
#include <vector>

#include "agent/policy/policy.h"

namespace kernelrl::agent {

class ScriptedPolicy final : public PolicyClient {
 public:
  ScriptedPolicy(std::string solutions_dir, int64_t policy_version, const Tokenizer* tokenizer,
                 int32_t im_end_id);
  absl::StatusOr<PolicyResponse> Generate(const PolicyRequest& request) override;

  // The script's reply text for a turn (exposed for tests).
  absl::StatusOr<std::string> ReplyText(const std::string& task_id, int turn) const;

 private:
  const std::string dir_;
  const int64_t version_;
  const Tokenizer* const tokenizer_;
  const int32_t im_end_id_;
};

}  // namespace kernelrl::agent

#endif  // KERNELRL_AGENT_POLICY_SCRIPTED_POLICY_H_
