// ChoicePolicy: the family's small action vocabulary (docs/LEARNING.md).
//
// A model learning from scratch cannot write a CUDA file token by token, so on
// family tasks its action is a choice vector: each assistant reply's first
// kNumSlots non-space characters pick one option per design slot (option =
// character code mod the slot's option count, so "2103" picks options 2, 1, 0, 3
// and every reply is some action), and ToolCalls() turns that reply into the
// normal tool calls an agent would make:
//     Write kernels/<family>.cu (or .cc)   the template rendered for the choice
//     Write model_new.py
//     Profile                              compile + verify + time in the sandbox
// A reply that is empty or starts with '.' submits (no calls). The trajectory
// holds exactly the ids the model sampled (the short reply); the tool turns hold
// what the tools answered, as for any agent. Honest about what it is: a
// vocabulary of a few tokens, not a model that writes kernels.
//
// Backends: the model behind `inner` (the learner's Policy service), or, with
// inner == nullptr, a scripted policy that draws choices uniformly at random
// (the RFT warm-up data): one candidate, then with probability 1/3 another, then
// submit. Its log-probs are those of its own uniform draw.
// Kernels are rendered for the task's inputs.device ("cpu" -> the CPU
// templates), or for `device` when set (tasks read from .py files carry none).
// Thread-safe.
#ifndef KERNELRL_AGENT_POLICY_CHOICE_POLICY_H_
#define KERNELRL_AGENT_POLICY_CHOICE_POLICY_H_

#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "agent/policy/policy.h"
#include "agent/family/templates.h"

namespace kernelrl::agent {

class ChoicePolicy final : public PolicyClient {
 public:
  ChoicePolicy(std::unique_ptr<PolicyClient> inner, const Tokenizer* tokenizer, int32_t im_end_id,
               std::string device, int64_t random_policy_version);

  absl::StatusOr<PolicyResponse> Generate(const PolicyRequest& request) override;
  absl::StatusOr<std::vector<ToolCall>> ToolCalls(const v1::Task& task, const std::string& reply) const override;
  // Replies are choices, not JSON calls: the prompt carries SKILL.md's vocabulary instead.
  bool ToolSchemasInPrompt() const override { return false; }

  // The choice a reply stands for; false when it submits.
  static bool ReplyChoice(const std::string& reply, const std::vector<family::Slot>& slots, family::Choice* choice);
  // The scripted random policy's reply text for a turn ("" = its choice of ending).
  std::string RandomReply(int turn, uint64_t seed) const;

 private:
  const std::unique_ptr<PolicyClient> inner_;
  const Tokenizer* const tokenizer_;
  const int32_t im_end_id_;
  const std::string device_;
  const int64_t random_version_;
  mutable absl::Mutex mu_;
  uint64_t draws_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kernelrl::agent

#endif  // KERNELRL_AGENT_POLICY_CHOICE_POLICY_H_
