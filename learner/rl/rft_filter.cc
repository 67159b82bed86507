#include "learner/rl/rft_filter.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "agent/chat/tool_calls.h"

namespace kernelrl::learner::rl {

std::string RftRejection(const v1::Trajectory& t, int max_repeated_calls) {
  if (!(t.reward() > 0)) return "reward <= 0";
  std::map<std::string, int> calls;  // "name args" -> count
  for (const v1::Turn& turn : t.turns()) {
    if (turn.role() != v1::Turn::ASSISTANT) continue;
    auto parsed = agent::ParseToolCalls(turn.content());
    if (!parsed.ok()) return absl::StrCat("tool call breaks the schema: ", parsed.status().message());
    for (const agent::ToolCall& c : *parsed) {
      const std::string key = absl::StrCat(c.name, " ", c.arguments_json);
      if (++calls[key] > max_repeated_calls) {
        return absl::StrCat("redundant loop: ", key.substr(0, 120), " called ", calls[key], " times");
      }
    }
  }
  return "";
}

}  // namespace kernelrl::learner::rl
