// ChatML rendering of a ReAct conversation with tools, to text and to token
// ids, with per-turn token ranges and the PPO loss mask.
//
// Format (one ChatML message per turn; docs/LEARNER.md "Chat and tool-call
// format" has examples):
//   system     <|im_start|>system\n{content}[\n\n{tools section}]<|im_end|>\n
//              (with tools and no system turn, a system message holding only
//              the tools section comes first: the "prelude")
//   user       <|im_start|>user\n{content}<|im_end|>\n
//   assistant  <|im_start|>assistant\n{body}<|im_end|>\n
//              body = content, then each tool call's FormatToolCall() block,
//              "\n"-separated (a block is preceded by "\n" when body is
//              non-empty); or, with generated_ids, the sampled tokens verbatim
//   tool       <|im_start|>user\n<tool_response>\n{content}\n</tool_response><|im_end|>\n
//   generation prompt: <|im_start|>assistant\n
//
// Contract:
// - Render() gives the same text and ids as HF transformers'
//   apply_chat_template(messages, tools=ToolSchemas(), tokenize=True) with
//   the template in agent/chat/testdata/make_chat_fixtures.py (tested on
//   random conversations). Text is tokenized by the Tokenizer, so special
//   tokens in it are special tokens, in content too, as in HF.
// - turns[i] = [token_begin, token_end) of input turn i: the whole message
//   including <|im_start|>role\n and the trailing "\n". Ranges are
//   contiguous and cover ids, after the prelude and before the generation
//   prompt. Each turn is tokenized alone, which equals tokenizing the whole
//   text because every turn boundary is "<|im_end|>\n" | "<|im_start|>"
//   (checked for this tokenizer in Create).
// - loss_mask is 1 exactly on assistant tokens the policy produces: the
//   body and its <|im_end|>; 0 on headers, the "\n" after <|im_end|>, and
//   all other turns. For a text body the mask starts at the token holding
//   the body's first byte (as HF's assistant mask does).
// - An assistant turn with generated_ids splices the sampled ids in as they
//   are (no re-tokenization: PPO needs the ids that were sampled). If they
//   do not end with <|im_end|> (cut off by max_tokens), <|im_end|> is
//   appended with mask 0. So Render(turns, true).ids is a prefix of
//   Render(turns + {assistant with generated_ids}, ...).ids: the actor can
//   generate from the first and record the second.
// Thread-safe (const after Create). The tokenizer must outlive it.
#ifndef KERNELRL_AGENT_CHAT_CHAT_FORMAT_H_
#define KERNELRL_AGENT_CHAT_CHAT_FORMAT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/json.h"
#include "agent/tokenizer/tokenizer.h"

namespace kernelrl::agent {

// Same numbers as kernelrl.v1.Turn.Role.
enum class ChatRole { kSystem = 1, kUser = 2, kAssistant = 3, kTool = 4 };

struct ToolCallSpec {
  std::string name;
  Json arguments;
};

struct ChatTurn {
  ChatRole role = ChatRole::kUser;
  std::string content;
  // Assistant only: calls rendered after content (canonical blocks). The
  // actor leaves this empty and puts the model's raw text in content.
  std::vector<ToolCallSpec> tool_calls;
  // Assistant only: the sampled ids of the body (incl. <|im_end|> if it was
  // sampled). When set, content must be empty or equal their decoding
  // (without the final <|im_end|>), and tool_calls must be empty.
  std::optional<std::vector<int32_t>> generated_ids;
};

struct TurnSpan {
  int32_t token_begin = 0, token_end = 0;  // [begin, end) in RenderedChat::ids.
  size_t text_begin = 0, text_end = 0;     // [begin, end) in RenderedChat::text.
};

struct RenderedChat {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<int32_t> loss_mask;  // Same length as ids.
  std::vector<TurnSpan> turns;     // One per input turn.
  int32_t prelude_end = 0;         // Tokens of the implicit tools-only system message.
};

class ChatFormat {
 public:
  // `tools`: the JSON array announced in the system turn (ToolSchemas() for
  // the actor); an empty array announces none.
  static absl::StatusOr<ChatFormat> Create(const Tokenizer* tokenizer, Json tools);

  absl::StatusOr<RenderedChat> Render(const std::vector<ChatTurn>& turns, bool add_generation_prompt) const;

  // The tools section of the system message ("" without tools).
  const std::string& tools_section() const { return tools_section_; }
  // "<|im_start|>assistant\n" as ids: what generation continues from.
  const std::vector<int32_t>& generation_prompt_ids() const { return generation_prompt_ids_; }
  // The token that ends an assistant turn (a stop token for sampling).
  int32_t im_end_id() const { return im_end_id_; }

 private:
  ChatFormat() = default;
  // Appends one message (text already complete) with mask 0.
  void AppendPlain(const std::string& message_text, RenderedChat* out) const;
  absl::Status AppendAssistant(const ChatTurn& turn, RenderedChat* out) const;

  const Tokenizer* tokenizer_ = nullptr;
  std::string tools_section_;
  int32_t im_start_id_ = -1, im_end_id_ = -1;
  std::vector<int32_t> newline_ids_;
  std::vector<int32_t> generation_prompt_ids_;
};

}  // namespace kernelrl::agent

#endif  // KERNELRL_AGENT_CHAT_CHAT_FORMAT_H_
