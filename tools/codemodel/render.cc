#include "tools/codemodel/render.h"

#include "absl/strings/str_cat.h"
#include "agent/chat/tools.h"

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

absl::StatusOr<agent::RenderedChat> RenderRecord(const Json& record, const RecordFormats& formats) {
  auto turns = RecordTurns(record);
  if (!turns.ok()) return turns.status();
  const Json* announced = FindJson(record, "tools_announced");
  const bool with_tools = announced == nullptr || !announced->is_boolean() || announced->get<bool>();
  return (with_tools ? formats.with_tools : formats.plain).Render(*turns, /*add_generation_prompt=*/false);
}

absl::StatusOr<std::string> RenderedText(const Json& record, const RecordFormats& formats) {
  auto r = RenderRecord(record, formats);
  if (!r.ok()) return r.status();
  return std::move(r->text);
}

}  // namespace kernelrl::codemodel
