// What a run's trajectories did, read from their tokens' text: the tool calls
// each assistant turn makes (parsed from JSON by the actor's parser), and the
// design of the kernel each trajectory ends with, found by replaying its
// Write / Edit / MultiEdit calls on kernels/ and recognising the result as a
// rendering of the family's template (tools/codemodel/corpus.h). Aggregated per
// family and policy-version bucket: the design distribution over training.
#ifndef KERNELRL_TOOLS_CODEMODEL_DESIGN_REPORT_H_
#define KERNELRL_TOOLS_CODEMODEL_DESIGN_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/json.h"
#include "proto/trajectory.pb.h"

namespace kernelrl::codemodel {

struct TrajectoryFacts {
  std::string id, task_id, family;
  // "engineer" when a scripted-engineer actor leased it (its id names the actor: "<lease>/engineer-..."),
  // else "model".
  std::string source;
  int64_t policy_version = 0;
  int assistant_turns = 0;
  int tool_calls = 0;        // Parsed from the assistant turns' JSON.
  int parse_errors = 0;      // Assistant turns whose calls did not parse.
  int64_t model_tokens = 0;  // loss_mask 1.
  double reward = 0;
  double verdict_reward = 0;  // final_verdict.reward.
  std::string outcome;        // final_verdict outcome name.
  // final_verdict's speed-ups (0 when it was not profiled).
  double speedup_vs_eager = 0, speedup_vs_compile = 0;
  std::string worker;         // final_verdict.worker_id: the sandbox worker that judged it.
  // Choice digits; "~" and digits: that design's rendering with up to two lines
  // replaced (kNearEdits: a garbled line, a #define out of its range); "none"
  // (no kernel written) or "other".
  std::string design;
  // "right" when the kernel has the task's pointwise op lines (OpLinesRight), "wrong" when not;
  // "" without a kernel or pointwise ops.
  std::string op_lines;
  // The same of the first kernel the rollout wrote: what the policy read from the task, before
  // any verdict told it more.
  std::string first_op_lines;
  // Write / Edit / MultiEdit / Bash calls the tools answered "Error" (an edit whose old_string the
  // file did not have), or Bash commands that exited non-zero: they changed nothing. The engineer's
  // Bash shapes (cp, sed -i of s/RE/TEXT/) are replayed on the files; other commands are not.
  int failed_file_calls = 0;
  // Profile calls the tools answered; of those after the first (the revisions), how many timed a
  // kernel of another design than the Profile before (a revision whose edit failed times the old
  // one again).
  int profiles = 0, revisions = 0, revisions_changed_design = 0;
  // A verdict of the rollout paid more than 0 (a kernel passed), and its reward is below 0: it ended
  // on a failing kernel after a passing one (a revision that broke it, with no way back).
  bool passed_then_failed = false;
  // The kernel's design as the rollout went, over its model tokens in order: a span per design
  // ("" before the first kernel file), from the assistant turn whose call wrote it to the next
  // change, with the model tokens in it (the spans' sum is model_tokens).
  struct DesignSpan {
    std::string design;
    int64_t model_tokens = 0;
  };
  std::vector<DesignSpan> design_spans;
};

// The line edits (NearestRendering) within which a kernel reads as "~" a design.
inline constexpr int kNearEdits = 4;

// `reference_source` of the task (its kernelrl-family line) decides the family; "" = unknown.
TrajectoryFacts Facts(const v1::Trajectory& t, const std::string& reference_source, const std::string& device);

// Summary of many: counts and means per source ("model", "engineer"), the revisions' among them; per
// family the design histogram of the model's trajectories by policy-version
// bucket of `bucket` versions, with how many of their kernels had the task's
// op lines right and wrong; and per task what each design of the model's
// earned (designs_by_task: n, the reward's mean, maximum and histogram, the
// median speed-ups of its profiled verdicts), which says whether the reward can
// tell a task's designs apart and which reward a task's best design reaches; and value_ceiling
// (ValueCeiling).
Json Summarise(const std::vector<TrajectoryFacts>& facts, int64_t bucket);

// What a critic could explain of these trajectories' returns (1 - residual / total sum of squares)
// knowing of each only its task ("task"), its task and its first kernel's design ("first_design"),
// or its task and the design it ended with ("final_design"): each trajectory valued by the mean
// return of the others with its key (leave one out: a critic does not value what it trained on; a
// key no other has falls back to the task's, then to all's). "by_token": over the model tokens,
// each valued by what was known at it: the task before the first kernel, the first design until
// the design's last change, the final one after it. "in_sample": the same tables with each
// trajectory in its own mean (what the keys decide, given enough trajectories of each).
Json ValueCeiling(const std::vector<TrajectoryFacts>& facts);

}  // namespace kernelrl::codemodel

#endif  // KERNELRL_TOOLS_CODEMODEL_DESIGN_REPORT_H_
