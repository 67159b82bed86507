// The tool-call text format: writing a call, and parsing the model's calls
// back out of an assistant turn.
//
// A call is one block in the assistant's text:
//
//   <tool_call>
//   {"name": "Bash", "arguments": {"command": "nvcc -O3 k.cu", "timeout_s": 120}}
//   </tool_call>
//
// FormatToolCall() writes the canonical block: the JSON object is Python's
// json.dumps(..., ensure_ascii=False) of {"name", "arguments"} (", " and
// ": " separators, non-ASCII kept, key order kept), which is what the HF
// chat template's `tojson` writes; numbers are written as Python writes the
// value json.loads read (1.50 becomes 1.5).
//
// ParseToolCalls() never crashes and never guesses: every `<tool_call>`
// block must hold one JSON object {"name": <known tool>, "arguments":
// <object satisfying the tool's schema>} followed by `</tool_call>`.
// "arguments" given as a JSON string holding such an object is accepted (a
// common model habit). Text before, between and after blocks is free. The
// JSON is delimited by scanning it (strings and escapes respected), so a
// "}" or even "</tool_call>" inside a string argument does not end the call.
// Anything else — invalid JSON, an unknown tool, a missing, extra or
// mistyped argument, an unterminated block (output cut off), a stray
// `</tool_call>` — is an InvalidArgument whose message names the call
// (1-based) and is meant to be shown to the model in the next tool turn.
#ifndef KERNELRL_AGENT_CHAT_TOOL_CALLS_H_
#define KERNELRL_AGENT_CHAT_TOOL_CALLS_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/json.h"

namespace kernelrl::agent {

inline constexpr absl::string_view kToolCallOpen = "<tool_call>";
inline constexpr absl::string_view kToolCallClose = "</tool_call>";

struct ToolCall {
  std::string name;
  Json arguments;              // A JSON object, validated against the tool's schema.
  std::string arguments_json;  // PythonJsonDumps(arguments): for Turn.tool_arguments_json.
  size_t text_begin = 0;       // Byte range of the whole <tool_call>...</tool_call> block.
  size_t text_end = 0;
};

// Python json.dumps(value, ensure_ascii=False) with default separators.
std::string PythonJsonDumps(const Json& value);

// "<tool_call>\n{\"name\": ..., \"arguments\": ...}\n</tool_call>".
std::string FormatToolCall(absl::string_view name, const Json& arguments);

// The calls in an assistant turn's text, in order (empty: no call).
absl::StatusOr<std::vector<ToolCall>> ParseToolCalls(absl::string_view assistant_text);

}  // namespace kernelrl::agent

#endif  // KERNELRL_AGENT_CHAT_TOOL_CALLS_H_
