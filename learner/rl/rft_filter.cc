#include "learner/rl/rft_filter.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "agent/chat/tool_calls.h"

namespace kernelrl::learner::rl {
namespace {

// The sandbox's tools: they take no arguments and evaluate the files as they are.
bool Evaluates(const std::string& tool) { return tool == "Compile" || tool == "Verify" || tool == "Profile"; }

// Tools that only read or evaluate the workspace: after a break they leave the
// files the final evaluation scored as they were.
bool LeavesFiles(const std::string& tool) {
  return Evaluates(tool) || tool == "Read" || tool == "Glob" || tool == "Grep";
}

}  // namespace

RftChoice ChooseForRft(const v1::Trajectory& t, int max_repeated_calls) {
  RftChoice choice;
  choice.turns = t.turns_size();
  if (!(t.reward() > 0)) {
    choice.rejection = "reward <= 0";
    choice.dropped_as = "rft_dropped_reward";
    return choice;
  }
  std::map<std::string, int> calls;  // "name args" -> count, over the kept turns
  // Compile / Verify / Profile take no arguments: the same call on changed files is the next
  // evaluation, not a loop, so they count per version of the files (a Write, Edit, MultiEdit or
  // Bash call starts the next).
  int files_version = 0;
  int first_break = -1;
  std::string break_reason;
  for (int i = 0; i < t.turns_size(); ++i) {
    const v1::Turn& turn = t.turns(i);
    if (turn.role() != v1::Turn::ASSISTANT) continue;
    auto parsed = agent::ParseToolCalls(turn.content());
    if (!parsed.ok()) {
      if (first_break < 0) {
        first_break = i;
        break_reason = absl::StrCat("tool call breaks the schema: ", parsed.status().message());
      }
      continue;
    }
    for (const agent::ToolCall& c : *parsed) {
      if (first_break >= 0) {
        if (!LeavesFiles(c.name)) {
          choice.rejection = absl::StrCat(break_reason, " (and a ", c.name, " call after it)");
          choice.dropped_as = "rft_dropped_schema";
          return choice;
        }
        continue;
      }
      const bool evaluates = Evaluates(c.name);
      if (c.name == "Write" || c.name == "Edit" || c.name == "MultiEdit" || c.name == "Bash") ++files_version;
      const std::string key =
          absl::StrCat(c.name, " ", c.arguments_json, evaluates ? absl::StrCat(" @", files_version) : "");
      if (++calls[key] > max_repeated_calls) {
        choice.rejection = absl::StrCat("redundant loop: ", key.substr(0, 120), " called ", calls[key], " times");
        choice.dropped_as = "rft_dropped_loop";
        return choice;
      }
    }
  }
  if (first_break < 0) return choice;
  bool acted = false;  // a well-formed assistant turn before the break
  for (int i = 0; i < first_break; ++i) acted |= t.turns(i).role() == v1::Turn::ASSISTANT;
  if (!acted) {
    choice.rejection = break_reason;
    choice.dropped_as = "rft_dropped_schema";
    return choice;
  }
  choice.turns = first_break;
  return choice;
}

v1::Trajectory RftPrefix(const v1::Trajectory& t, int turns) {
  if (turns >= t.turns_size()) return t;
  v1::Trajectory p = t;
  p.mutable_turns()->DeleteSubrange(turns, t.turns_size() - turns);
  const int end = turns > 0 ? t.turns(turns - 1).token_end() : 0;
  p.mutable_token_ids()->Truncate(end);
  p.mutable_logprobs()->Truncate(end);
  p.mutable_loss_mask()->Truncate(end);
  p.mutable_stats()->set_num_turns(turns);
  p.mutable_stats()->set_num_tokens(end);
  return p;
}

}  // namespace kernelrl::learner::rl
