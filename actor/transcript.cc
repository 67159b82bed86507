#include "actor/transcript.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kernelrl::actor {
namespace {

std::string VerdictLine(const v1::Verdict& v) {
  std::string line = absl::StrFormat("%s (reward %g)", v1::Verdict::Outcome_Name(v.outcome()), v.reward());
  if (!v.summary().empty()) absl::StrAppend(&line, ": ", v.summary());
  return line;
}

}  // namespace

std::string Transcript(const v1::Trajectory& t) {
  std::string out = absl::StrFormat("task %s\ntrajectory %s (policy v%d)\n%d turns, %d tokens, stopped: %s\n",
                                    t.task_id(), t.id(), t.policy_version(), t.stats().num_turns(),
                                    t.stats().num_tokens(), t.stats().stop_reason());
  absl::StrAppend(&out, "final verdict: ",
                  t.has_final_verdict() ? VerdictLine(t.final_verdict()) : absl::StrCat("none (reward ", t.reward(), ")"),
                  "\n");
  for (const v1::Turn& turn : t.turns()) {
    absl::StrAppend(&out, "\n=== ", v1::Turn::Role_Name(turn.role()));
    if (turn.role() == v1::Turn::ASSISTANT) {
      absl::StrAppend(&out, " (policy v", turn.policy_version(), ", ", turn.token_end() - turn.token_begin(),
                      " tokens)");
    } else if (turn.role() == v1::Turn::TOOL) {
      absl::StrAppend(&out, " ", turn.tool_name());
    }
    absl::StrAppend(&out, "\n", turn.content());
    if (!turn.content().empty() && turn.content().back() != '\n') out += '\n';
    if (turn.has_verdict()) absl::StrAppend(&out, "[verdict: ", VerdictLine(turn.verdict()), "]\n");
  }
  return out;
}

namespace {
std::string RolloutFileName(const std::string& task_id, int rollout, const char* extension) {
  std::string name = task_id;
  for (char& c : name) {
    if (c == '/') c = '-';
  }
  return absl::StrCat(name, "-", rollout, extension);
}
}  // namespace

std::string TranscriptFileName(const std::string& task_id, int rollout) {
  return RolloutFileName(task_id, rollout, ".txt");
}

std::string TrajectoryFileName(const std::string& task_id, int rollout) {
  return RolloutFileName(task_id, rollout, ".pb");
}

}  // namespace kernelrl::actor
