// ToolRunner: executes the agent's tool calls (agent/chat/tools.h) in one
// rollout's workspace and turns each into the observation the model reads.
//
// Contract:
//  * Run() never fails and never throws: a bad path, a missing file, a
//    non-unique Edit, an unknown job id, a sandbox outage... each becomes an
//    observation starting with "Error:" (is_error = true), worded so the model
//    can fix its call.
//  * Write to an existing file requires that this rollout Read (or wrote) it
//    before. Edit/MultiEdit replace exact text that must occur exactly once;
//    MultiEdit applies all edits or none.
//  * Compile / Verify / Profile send the workspace snapshot (never model.py,
//    which the sandbox takes from the task) to the EvaluationClient; the
//    verdict is returned with the observation.
// One rollout, one thread.
#ifndef KERNELRL_ACTOR_TOOLS_H_
#define KERNELRL_ACTOR_TOOLS_H_

#include <map>
#include <memory>
#include <set>
#include <string>

#include "actor/evaluation.h"
#include "actor/shell.h"
#include "actor/workspace.h"
#include "common/json.h"
#include "proto/actor_config.pb.h"
#include "proto/task.pb.h"

namespace kernelrl::actor {

struct ToolResult {
  std::string text;
  bool is_error = false;
  bool has_verdict = false;
  v1::Verdict verdict;
  double sandbox_seconds = 0;  // Time inside EvaluationClient::Evaluate.
};

class ToolRunner {
 public:
  // All pointers must outlive the runner. `shell` may be null (Bash then reports it is unavailable).
  ToolRunner(RolloutWorkspace* workspace, ShellSession* shell, EvaluationClient* evaluator, const v1::Task* task,
             v1::ToolLimits limits, std::string request_id_prefix);

  ToolResult Run(const std::string& name, const Json& arguments);

  int num_evaluations() const { return num_evaluations_; }

 private:
  ToolResult Bash(const Json& a);
  ToolResult BashOutput(const Json& a);
  ToolResult KillBash(const Json& a);
  ToolResult Read(const Json& a);
  ToolResult Write(const Json& a);
  ToolResult Edit(const Json& a);
  ToolResult MultiEdit(const Json& a);
  ToolResult Glob(const Json& a);
  ToolResult Grep(const Json& a);
  ToolResult TodoWrite(const Json& a);
  ToolResult Evaluate(const std::string& which);

  RolloutWorkspace* const workspace_;
  ShellSession* const shell_;
  EvaluationClient* const evaluator_;
  const v1::Task* const task_;
  const v1::ToolLimits limits_;
  const std::string request_id_prefix_;
  std::set<std::string> known_files_;  // Read or written by this rollout.
  int num_evaluations_ = 0;
};

// Glob matching on '/'-separated paths: '*' and '?' stay within a component,
// '**' spans components (also zero), [..] classes.
bool GlobMatch(const std::string& pattern, const std::string& path);

// The verdict as the model reads it, for each of Compile / Verify / Profile.
std::string DescribeVerdict(const std::string& which, const v1::Verdict& v);

}  // namespace kernelrl::actor

#endif  // KERNELRL_ACTOR_TOOLS_H_
