// The tools the actor offers the policy, as JSON Schema, in one place: the
// CUDA-Agent action space (Bash with background jobs, Read, Write, Edit,
// MultiEdit, Glob, Grep, TodoWrite) plus Compile / Verify / Profile, which
// call the sandbox service and which the agent cannot alter.
//
// Contract: ToolSchemas() is the list announced in the system turn (the
// `tools=` argument of HF's apply_chat_template: {"type": "function",
// "function": {"name", "description", "parameters"}} per tool, in the order
// of ToolNames()). ValidateToolArguments() checks a call against the same
// schema, so what the model is told and what the actor accepts cannot drift
// apart. Paths are relative to the task workspace; the actor resolves and
// confines them, not this file.
//
//   Bash       {command: string, timeout_s?: integer >= 1, run_in_background?: boolean}
//   BashOutput {bash_id: string}
//   KillBash   {bash_id: string}
//   Read       {path: string, offset?: integer >= 1, limit?: integer >= 1}
//   Write      {path: string, content: string}
//   Edit       {path: string, old_string: string, new_string: string}
//   MultiEdit  {path: string, edits: [{old_string: string, new_string: string}, ...] (>= 1)}
//   Glob       {pattern: string}
//   Grep       {pattern: string, path?: string, glob?: string}
//   TodoWrite  {todos: [{content: string, status: "pending"|"in_progress"|"completed"}, ...]}
//   Compile, Verify, Profile  {}
//
// Validation is the JSON Schema subset these schemas use: types object,
// string (with `enum`), integer (with `minimum`), boolean, array (`items`,
// `minItems`); `properties`, `required`, `additionalProperties: false` at
// every level; duplicate keys are rejected too. Errors are InvalidArgument,
// worded to be shown to the model, naming the argument path
// ("edits[2].old_string").
#ifndef KERNELRL_AGENT_CHAT_TOOLS_H_
#define KERNELRL_AGENT_CHAT_TOOLS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/json.h"

namespace kernelrl::agent {

// The schema list (a JSON array), parsed once.
const Json& ToolSchemas();
// Tool names in announcement order.
const std::vector<std::string>& ToolNames();
bool IsKnownTool(absl::string_view name);
// OK if `arguments` is an object satisfying tool `name`'s parameter schema.
absl::Status ValidateToolArguments(absl::string_view name, const Json& arguments);

}  // namespace kernelrl::agent

#endif  // KERNELRL_AGENT_CHAT_TOOLS_H_
