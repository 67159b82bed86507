// TrajectoryBuilder: the token-in/token-out record of one ReAct rollout.
//
// The actor appends turns as they happen; the builder keeps the rendered
// token ids incrementally (each new turn is tokenized once, never the whole
// history again) and hands the policy exactly the prefix it must continue.
//
// Invariants (tested against ChatFormat::Render of the whole history):
//  * PromptIds() == Render(history, /*add_generation_prompt=*/true).ids.
//  * Build().token_ids == Render(history, false).ids; an assistant turn's
//    tokens are the sampled ids verbatim (never a re-tokenization of the
//    decoded text); a cut-off turn gets <|im_end|> appended with mask 0.
//  * loss_mask is 1 exactly on sampled tokens; logprobs hold the sampled
//    log-probs at those positions, in order, and 0 elsewhere.
//  * Turn.policy_version is the version that sampled that turn;
//    Trajectory.policy_version is the oldest of them.
//  * Trajectory.sampling is the assistant turns' SamplingInfo; turns that
//    disagree make it policy "mixed" (no single distribution the learner
//    could weight them by).
// Tool results are rendered with "<|" neutralized ("<\u200b|"), so a file
// holding "<|im_end|>" cannot forge a turn boundary.
// Not thread-safe: one builder per rollout.
#ifndef KERNELRL_AGENT_TRAJECTORY_BUILDER_H_
#define KERNELRL_AGENT_TRAJECTORY_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/chat/chat_format.h"
#include "agent/tokenizer/tokenizer.h"
#include "proto/trajectory.pb.h"

namespace kernelrl::agent {

// One sampled assistant turn, as the policy returned it.
struct SampledTurn {
  std::vector<int32_t> ids;     // Sampled ids (incl. <|im_end|> if it was sampled).
  std::vector<float> logprobs;  // One per id.
  int64_t policy_version = 0;
  v1::SamplingInfo sampling;    // As the policy reported it (PolicyResponse::sampling).
};

// "<|" -> "<\u200b|": tool output can never contain a ChatML special token.
std::string NeutralizeSpecialTokens(const std::string& text);

class TrajectoryBuilder {
 public:
  // `with_tools` is the format that announces the tools (first turn);
  // `plain` has none (it renders the later turns one at a time). Both must
  // share `tokenizer` and outlive the builder.
  TrajectoryBuilder(const ChatFormat* with_tools, const ChatFormat* plain, const Tokenizer* tokenizer);

  // The opening: system prompt (tools section appended) and the task.
  absl::Status Start(const std::string& system, const std::string& user);
  // What the policy continues: history + "<|im_start|>assistant\n".
  std::vector<int32_t> PromptIds() const;
  // Number of ids PromptIds() would return (the context the next sample sees).
  int64_t prompt_length() const { return static_cast<int64_t>(ids_.size() + generation_prompt_.size()); }

  // Appends a sampled assistant turn; returns its text (decoded, without the
  // final <|im_end|>) for the tool-call parser.
  absl::StatusOr<std::string> AddAssistant(const SampledTurn& sample);
  // Appends one tool result (rendered as a user message in <tool_response>).
  // `verdict` may be null.
  absl::Status AddToolResult(const std::string& tool_name, const std::string& arguments_json,
                             const std::string& content, const v1::Verdict* verdict);
  // Records the call an assistant turn made (tool_name on the ASSISTANT turn
  // when it made exactly one call).
  void SetAssistantCall(const std::string& tool_name, const std::string& arguments_json);

  // The whole record; ids, mask and logprobs as above. Stats other than the
  // token counts are the caller's.
  v1::Trajectory Build() const;

  int num_turns() const { return static_cast<int>(turns_.size()); }
  int num_assistant_turns() const { return num_assistant_; }
  // The chat history (for tests that re-render it).
  const std::vector<ChatTurn>& history() const { return history_; }

 private:
  // Appends one rendered turn (ids, mask, its span) and its proto Turn.
  absl::Status Append(const ChatTurn& turn, const ChatFormat& format, v1::Turn proto_turn,
                      const std::vector<float>* logprobs);

  const ChatFormat* with_tools_;
  const ChatFormat* plain_;
  const Tokenizer* tokenizer_;
  std::vector<int32_t> generation_prompt_;
  std::vector<ChatTurn> history_;
  std::vector<int32_t> ids_, mask_;
  std::vector<float> logprobs_;
  std::vector<v1::Turn> turns_;
  int num_assistant_ = 0;
  v1::SamplingInfo sampling_;  // The first assistant turn's; policy "mixed" once turns disagree.
  int64_t num_generated_ = 0;
};

}  // namespace kernelrl::agent

#endif  // KERNELRL_AGENT_TRAJECTORY_BUILDER_H_
