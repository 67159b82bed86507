#include "tools/codemodel/render.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "agent/chat/tools.h"
#include "agent/tokenizer/bpe_trainer.h"

namespace kernelrl::codemodel {

absl::StatusOr<RecordFormats> RecordFormats::Create(const agent::Tokenizer* tokenizer) {
  auto with_tools = agent::ChatFormat::Create(tokenizer, agent::ToolSchemas());
  if (!with_tools.ok()) return with_tools.status();
  auto plain = agent::ChatFormat::Create(tokenizer, Json::array());
  if (!plain.ok()) return plain.status();
  return RecordFormats{*std::move(with_tools), *std::move(plain)};
}

absl::StatusOr<std::vector<agent::ChatTurn>> RecordTurns(const Json& record) {
  const Json* messages = FindJson(record, "messages");
  if (messages == nullptr || !messages->is_array()) return absl::InvalidArgumentError("record without messages");
  std::vector<agent::ChatTurn> turns;
  for (const Json& m : *messages) {
    const Json* role = FindJson(m, "role");
    const Json* content = FindJson(m, "content");
    if (role == nullptr || content == nullptr) return absl::InvalidArgumentError("message without role or content");
    if (!role->is_string() || !content->is_string()) {
      return absl::InvalidArgumentError("message whose role or content is not a string");
    }
    agent::ChatTurn t;
    const std::string& r = role->get_ref<const std::string&>();
    t.role = r == "system" ? agent::ChatRole::kSystem
             : r == "user" ? agent::ChatRole::kUser
             : r == "assistant" ? agent::ChatRole::kAssistant
                                : agent::ChatRole::kTool;
    if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
      return absl::InvalidArgumentError(absl::StrCat("unknown role ", r));
    }
    t.content = content->get<std::string>();
    turns.push_back(std::move(t));
  }
  return turns;
}

absl::StatusOr<agent::RenderedChat> RenderRecord(const Json& record, const RecordFormats& formats,
                                                 bool train_rejected) {
  auto turns = RecordTurns(record);
  if (!turns.ok()) return turns.status();
  const Json* announced = FindJson(record, "tools_announced");
  const bool with_tools = announced == nullptr || !announced->is_boolean() || announced->get<bool>();
  auto rendered = (with_tools ? formats.with_tools : formats.plain).Render(*turns, /*add_generation_prompt=*/false);
  if (!rendered.ok() || train_rejected) return rendered;
  const Json& messages = *FindJson(record, "messages");
  for (size_t i = 0; i < messages.size() && i < rendered->turns.size(); ++i) {
    const Json* rejected = FindJson(messages[i], "rejected");
    if (rejected == nullptr || !rejected->is_boolean() || !rejected->get<bool>()) continue;
    const agent::TurnSpan& span = rendered->turns[i];
    std::fill(rendered->loss_mask.begin() + span.token_begin, rendered->loss_mask.begin() + span.token_end, 0);
  }
  return rendered;
}

absl::StatusOr<std::string> RenderedText(const Json& record, const RecordFormats& formats) {
  auto r = RenderRecord(record, formats);
  if (!r.ok()) return r.status();
  return std::move(r->text);
}

void LengthAudit::Add(const agent::RenderedChat& rendered) {
  const int64_t size = static_cast<int64_t>(rendered.ids.size());
  longest = std::max(longest, size);
  records_over += context_tokens > 0 && size > context_tokens;
  int64_t run = 0;
  for (size_t i = 0; i <= rendered.loss_mask.size(); ++i) {
    if (i < rendered.loss_mask.size() && rendered.loss_mask[i]) {
      ++run;
      continue;
    }
    longest_turn = std::max(longest_turn, run);
    turns_over += max_turn_tokens > 0 && run > max_turn_tokens;
    run = 0;
  }
}

absl::Status LengthAudit::Check() const {
  if (turns_over > 0) {
    return absl::InvalidArgumentError(absl::StrCat(turns_over, " assistant turns are longer than rollout.max_new_tokens_per_turn (",
                                                   max_turn_tokens, "; the longest has ", longest_turn,
                                                   " tokens): raise it, or the policy learns replies it cannot finish"));
  }
  if (records_over > 0) {
    return absl::InvalidArgumentError(absl::StrCat(records_over, " trajectories are longer than rollout.context_tokens (",
                                                   context_tokens, "; the longest has ", longest,
                                                   " tokens): raise it, or the policy learns endings it never reaches"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TrainRecordTokenizer(const std::vector<Json>& records, int vocab_size) {
  // Rendered through a tokenizer of bytes alone: the text, specials included, as the chat format writes it.
  auto bytes = agent::TrainBpe({}, agent::BpeTrainerOptions{256, 2});
  if (!bytes.ok()) return bytes.status();
  auto bootstrap = agent::Tokenizer::FromJson(*bytes);
  if (!bootstrap.ok()) return bootstrap.status();
  auto formats = RecordFormats::Create(bootstrap->get());
  if (!formats.ok()) return formats.status();
  std::vector<std::string> documents;
  for (const Json& r : records) {
    auto text = RenderedText(r, *formats);
    if (!text.ok()) return text.status();
    documents.push_back(*std::move(text));
  }
  return agent::TrainBpe(documents, agent::BpeTrainerOptions{vocab_size, 2});
}

}  // namespace kernelrl::codemodel
