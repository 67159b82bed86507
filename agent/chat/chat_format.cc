#include "agent/chat/chat_format.h"

#include "absl/strings/str_cat.h"
#include "agent/chat/tool_calls.h"

namespace kernelrl::agent {
namespace {

constexpr absl::string_view kImStart = "<|im_start|>";
constexpr absl::string_view kImEnd = "<|im_end|>";

// The tools section; the Jinja template in testdata/make_chat_fixtures.py
// writes the same text.
std::string ToolsSection(const Json& tools) {
  std::string lines;
  for (const Json& t : tools) absl::StrAppend(&lines, PythonJsonDumps(t), "\n");
  return absl::StrCat(
      "# Tools\n\nYou can call the functions below. Each is described by one JSON object per line inside "
      "<tools></tools>:\n<tools>\n",
      lines,
      "</tools>\n\nTo call a function, write its name and arguments as a JSON object inside "
      "<tool_call></tool_call> tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
      "<arguments-json-object>}\n</tool_call>\nYou may call several functions in one reply. Each result "
      "comes back in a user message inside <tool_response></tool_response> tags.");
}

}  // namespace

absl::StatusOr<ChatFormat> ChatFormat::Create(const Tokenizer* tokenizer, Json tools) {
  if (tokenizer == nullptr) return absl::InvalidArgumentError("ChatFormat: no tokenizer");
  if (!tools.is_array()) return absl::InvalidArgumentError("ChatFormat: tools must be a JSON array");
  ChatFormat f;
  f.tokenizer_ = tokenizer;
  f.im_start_id_ = tokenizer->TokenId(kImStart);
  f.im_end_id_ = tokenizer->TokenId(kImEnd);
  if (f.im_start_id_ < 0 || f.im_end_id_ < 0) {
    return absl::FailedPreconditionError("ChatFormat: the tokenizer has no <|im_start|> / <|im_end|> token");
  }
  f.newline_ids_ = tokenizer->Encode("\n");
  // Turns are tokenized one by one; that equals tokenizing the whole text
  // only if the special tokens cut the text there (no lstrip/rstrip eating
  // the "\n", no merge across them).
  std::vector<int32_t> want = {f.im_end_id_};
  want.insert(want.end(), f.newline_ids_.begin(), f.newline_ids_.end());
  want.push_back(f.im_start_id_);
  if (tokenizer->Encode(absl::StrCat(kImEnd, "\n", kImStart)) != want) {
    return absl::FailedPreconditionError(
        "ChatFormat: <|im_end|>\\n<|im_start|> does not tokenize as three separate parts (lstrip/rstrip on the "
        "special tokens?); per-turn token ranges would be wrong");
  }
  f.generation_prompt_ids_ = tokenizer->Encode(absl::StrCat(kImStart, "assistant\n"));
  if (!tools.empty()) f.tools_section_ = ToolsSection(tools);
  return f;
}

void ChatFormat::AppendPlain(const std::string& message_text, RenderedChat* out) const {
  out->text += message_text;
  std::vector<int32_t> ids = tokenizer_->Encode(message_text);
  out->ids.insert(out->ids.end(), ids.begin(), ids.end());
  out->loss_mask.resize(out->ids.size(), 0);
}

absl::Status ChatFormat::AppendAssistant(const ChatTurn& turn, RenderedChat* out) const {
  const std::string header = absl::StrCat(kImStart, "assistant\n");
  if (turn.generated_ids.has_value()) {
    if (!turn.tool_calls.empty()) {
      return absl::InvalidArgumentError("assistant turn with generated_ids must not also carry tool_calls");
    }
    std::vector<int32_t> body = *turn.generated_ids;
    const bool sampled_end = !body.empty() && body.back() == im_end_id_;
    for (size_t i = 0; i + 1 < body.size(); ++i) {
      if (body[i] == im_end_id_) {
        return absl::InvalidArgumentError(absl::StrCat("generated_ids has <|im_end|> at ", i, ", before its end"));
      }
    }
    if (sampled_end) body.pop_back();
    const std::string body_text = tokenizer_->Decode(body);
    if (!turn.content.empty() && turn.content != body_text) {
      return absl::InvalidArgumentError("assistant content differs from the decoding of its generated_ids");
    }
    out->text += absl::StrCat(header, body_text, kImEnd);
    out->ids.insert(out->ids.end(), generation_prompt_ids_.begin(), generation_prompt_ids_.end());
    out->loss_mask.resize(out->ids.size(), 0);
    out->ids.insert(out->ids.end(), body.begin(), body.end());
    out->ids.push_back(im_end_id_);
    out->loss_mask.resize(out->ids.size(), 1);
    if (!sampled_end) out->loss_mask.back() = 0;  // Cut off: the closing token is ours, not the policy's.
  } else {
    std::string body = turn.content;
    for (const ToolCallSpec& call : turn.tool_calls) {
      if (!body.empty()) body += "\n";
      body += FormatToolCall(call.name, call.arguments);
    }
    const std::string message = absl::StrCat(header, body, kImEnd);
    std::vector<int32_t> ids = tokenizer_->Encode(message);
    // ids = <|im_start|> "assistant\n"+body <|im_end|>.
    if (ids.size() < 2 || ids.front() != im_start_id_ || ids.back() != im_end_id_) {
      return absl::InternalError("assistant turn did not tokenize as <|im_start|> ... <|im_end|>");
    }
    const size_t n = ids.size() - 1;  // Index of the closing <|im_end|>.
    // The mask starts at the token holding the body's first byte.
    const size_t header_bytes = header.size() - kImStart.size();
    size_t i = 1, bytes = 0;
    while (i < n) {
      const size_t len = tokenizer_->Decode({ids[i]}).size();
      if (bytes + len > header_bytes) break;
      bytes += len;
      ++i;
    }
    out->text += message;
    const size_t base = out->ids.size();
    out->ids.insert(out->ids.end(), ids.begin(), ids.end());
    out->loss_mask.resize(out->ids.size(), 0);
    for (size_t k = i; k <= n; ++k) out->loss_mask[base + k] = 1;
  }
  out->text += "\n";
  out->ids.insert(out->ids.end(), newline_ids_.begin(), newline_ids_.end());
  out->loss_mask.resize(out->ids.size(), 0);
  return absl::OkStatus();
}

absl::StatusOr<RenderedChat> ChatFormat::Render(const std::vector<ChatTurn>& turns,
                                                bool add_generation_prompt) const {
  RenderedChat out;
  const bool has_system = !turns.empty() && turns.front().role == ChatRole::kSystem;
  if (!tools_section_.empty() && !has_system) {
    AppendPlain(absl::StrCat(kImStart, "system\n", tools_section_, kImEnd, "\n"), &out);
    out.prelude_end = static_cast<int32_t>(out.ids.size());
  }
  for (size_t t = 0; t < turns.size(); ++t) {
    const ChatTurn& turn = turns[t];
    if (turn.role != ChatRole::kAssistant && (turn.generated_ids.has_value() || !turn.tool_calls.empty())) {
      return absl::InvalidArgumentError(absl::StrCat("turn ", t, ": only assistant turns carry generated_ids or tool_calls"));
    }
    TurnSpan span;
    span.token_begin = static_cast<int32_t>(out.ids.size());
    span.text_begin = out.text.size();
    switch (turn.role) {
      case ChatRole::kSystem: {
        if (t != 0) return absl::InvalidArgumentError(absl::StrCat("turn ", t, ": a system turn must come first"));
        std::string content = turn.content;
        if (!tools_section_.empty()) content = content.empty() ? tools_section_ : absl::StrCat(content, "\n\n", tools_section_);
        AppendPlain(absl::StrCat(kImStart, "system\n", content, kImEnd, "\n"), &out);
        break;
      }
      case ChatRole::kUser:
        AppendPlain(absl::StrCat(kImStart, "user\n", turn.content, kImEnd, "\n"), &out);
        break;
      case ChatRole::kTool:
        AppendPlain(absl::StrCat(kImStart, "user\n<tool_response>\n", turn.content, "\n</tool_response>", kImEnd, "\n"),
                    &out);
        break;
      case ChatRole::kAssistant:
        if (absl::Status st = AppendAssistant(turn, &out); !st.ok()) {
          return absl::Status(st.code(), absl::StrCat("turn ", t, ": ", st.message()));
        }
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat("turn ", t, ": unknown role ", static_cast<int>(turn.role)));
    }
    span.token_end = static_cast<int32_t>(out.ids.size());
    span.text_end = out.text.size();
    out.turns.push_back(span);
  }
  if (add_generation_prompt) {
    out.text += absl::StrCat(kImStart, "assistant\n");
    out.ids.insert(out.ids.end(), generation_prompt_ids_.begin(), generation_prompt_ids_.end());
    out.loss_mask.resize(out.ids.size(), 0);
  }
  return out;
}

}  // namespace kernelrl::agent
