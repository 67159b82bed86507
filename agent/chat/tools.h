// The six tools the actor offers the policy, as JSON Schema, in one place.
//
// Contract: ToolSchemas() is the list announced in the system turn (the
// `tools=` argument of HF's apply_chat_template: {"type": "function",
// "function": {"name", "description", "parameters"}} per tool, in the order
// Bash, Read, Write, Edit, Glob, Grep). ValidateToolArguments() checks a
// call against the same schema, so what the model is told and what the
// actor accepts cannot drift apart. Paths are relative to the task
// workspace; the actor resolves and confines them, not this file.
//
//   Bash  {command: string, timeout_s?: integer >= 1}
//   Read  {path: string, offset?: integer >= 1, limit?: integer >= 1}
//   Write {path: string, content: string}
//   Edit  {path: string, old_string: string, new_string: string}
//   Glob  {pattern: string}
//   Grep  {pattern: string, path?: string, glob?: string}
//
// Validation is the JSON Schema subset these schemas use: an object,
// `properties` of type string / integer (with `minimum`), `required`,
// `additionalProperties: false`; duplicate keys are rejected too. Errors are
// InvalidArgument, worded to be shown to the model.
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
