#include "learner/rl/rft_filter.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "agent/chat/tool_calls.h"

namespace kernelrl::learner::rl {

std::string RftRejection(const v1::Trajectory& t, int max_repeated_calls) {
  if (!(t.reward() > 0)) return "reward <= 0";
  std::map<std::string, int> calls;  // "name args" -> count
  // Compile / Verify / Profile take no arguments: the same call on changed files is the next
  // evaluation, not a loop, so they count per version of the files (a Write, Edit, MultiEdit or
  // Bash call starts the next).
  int files_version = 0;
  for (const v1::Turn& turn : t.turns()) {
    if (turn.role() != v1::Turn::ASSISTANT) continue;
    auto parsed = agent::ParseToolCalls(turn.content());
    if (!parsed.ok()) return absl::StrCat("tool call breaks the schema: ", parsed.status().message());
    for (const agent::ToolCall& c : *parsed) {
      const bool evaluates = c.name == "Compile" || c.name == "Verify" || c.name == "Profile";
      if (c.name == "Write" || c.name == "Edit" || c.name == "MultiEdit" || c.name == "Bash") ++files_version;
      const std::string key =
          absl::StrCat(c.name, " ", c.arguments_json, evaluates ? absl::StrCat(" @", files_version) : "");
      if (++calls[key] > max_repeated_calls) {
        return absl::StrCat("redundant loop: ", key.substr(0, 120), " called ", calls[key], " times");
      }
    }
  }
  return "";
}

}  // namespace kernelrl::learner::rl
