#include "agent/chat/tool_calls.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/chat/tools.h"

namespace kernelrl::agent {
namespace {

// Python's separators (", " and ": ") are not among nlohmann's dump options, so
// containers are walked here and every scalar is written by the library.
void DumpPython(const Json& v, std::string* out) {
  if (v.is_array()) {
    out->push_back('[');
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out->append(", ");
      DumpPython(v[i], out);
    }
    out->push_back(']');
  } else if (v.is_object()) {
    out->push_back('{');
    bool first = true;
    for (const auto& [key, value] : v.items()) {
      if (!first) out->append(", ");
      first = false;
      out->append(JsonString(key));
      out->append(": ");
      DumpPython(value, out);
    }
    out->push_back('}');
  } else {
    out->append(DumpJson(v));
  }
}

bool IsJsonSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// End (one past the closing brace) of the JSON object starting at `begin`
// ('{'), found by scanning strings and nesting; npos if the text ends first.
size_t ScanObjectEnd(absl::string_view s, size_t begin) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = begin; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if ((c == '}' || c == ']') && --depth == 0) return i + 1;
  }
  return absl::string_view::npos;
}

absl::Status CallError(int index, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("tool call ", index, ": ", what));
}

// Checks the parsed block object and fills `call`.
absl::Status ReadCall(int index, const Json& obj, ToolCall* call) {
  if (!obj.is_object()) return CallError(index, "expected a JSON object {\"name\": ..., \"arguments\": {...}}");
  const Json* name = nullptr;
  const Json* args = nullptr;
  for (const auto& [key, value] : obj.items()) {
    const Json** slot = key == "name" ? &name : key == "arguments" ? &args : nullptr;
    if (slot == nullptr) {
      return CallError(index, absl::StrCat("unexpected key \"", key, "\"; a call has only \"name\" and \"arguments\""));
    }
    if (*slot != nullptr) return CallError(index, absl::StrCat("key \"", key, "\" is given twice"));
    *slot = &value;
  }
  if (name == nullptr || !name->is_string()) return CallError(index, "\"name\" (a string) is missing");
  if (args == nullptr) return CallError(index, absl::StrCat(name->get<std::string>(), ": \"arguments\" is missing"));
  Json arguments = *args;
  if (arguments.is_string()) {  // Double-encoded arguments.
    auto inner = ParseJson(arguments.get<std::string>());
    if (!inner.ok()) {
      return CallError(index, absl::StrCat(name->get<std::string>(), ": \"arguments\" is a string that is not a JSON object (",
                                           inner.status().message(), ")"));
    }
    arguments = *std::move(inner);
  }
  if (absl::Status st = ValidateToolArguments(name->get<std::string>(), arguments); !st.ok()) {
    return CallError(index, st.message());
  }
  call->name = name->get<std::string>();
  call->arguments_json = PythonJsonDumps(arguments);
  call->arguments = std::move(arguments);
  return absl::OkStatus();
}

}  // namespace

std::string PythonJsonDumps(const Json& value) {
  std::string out;
  DumpPython(value, &out);
  return out;
}

std::string FormatToolCall(absl::string_view name, const Json& arguments) {
  Json call = Json::object({{"name", Json(std::string(name))}, {"arguments", arguments}});
  return absl::StrCat(kToolCallOpen, "\n", PythonJsonDumps(call), "\n", kToolCallClose);
}

absl::StatusOr<std::vector<ToolCall>> ParseToolCalls(absl::string_view text) {
  std::vector<ToolCall> calls;
  size_t pos = 0;
  for (int index = 1;; ++index) {
    const size_t open = text.find(kToolCallOpen, pos);
    const size_t stray = text.find(kToolCallClose, pos);
    if (stray != absl::string_view::npos && (open == absl::string_view::npos || stray < open)) {
      return CallError(index, absl::StrCat("found ", kToolCallClose, " without an opening ", kToolCallOpen));
    }
    if (open == absl::string_view::npos) break;
    size_t begin = open + kToolCallOpen.size();
    while (begin < text.size() && IsJsonSpace(text[begin])) ++begin;
    const size_t close_tag = text.find(kToolCallClose, begin);
    if (begin >= text.size()) {
      return CallError(index, absl::StrCat("unterminated ", kToolCallOpen, " (the output was cut off)"));
    }
    if (text[begin] != '{') {
      return CallError(index, absl::StrCat("expected a JSON object after ", kToolCallOpen));
    }
    size_t end = ScanObjectEnd(text, begin);
    if (end == absl::string_view::npos) {
      if (close_tag == absl::string_view::npos) {
        return CallError(index, absl::StrCat("unterminated ", kToolCallOpen, " (the output was cut off)"));
      }
      end = close_tag;  // Unbalanced JSON: let the parser say where it breaks.
    }
    auto obj = ParseJson(text.substr(begin, end - begin));
    if (!obj.ok()) return CallError(index, absl::StrCat("invalid JSON: ", obj.status().message()));
    size_t after = end;
    while (after < text.size() && IsJsonSpace(text[after])) ++after;
    if (text.substr(after, kToolCallClose.size()) != kToolCallClose) {
      if (absl::StartsWith(kToolCallClose, text.substr(after))) {  // Ends inside or before the tag.
        return CallError(index, absl::StrCat("unterminated ", kToolCallOpen, " (the output was cut off)"));
      }
      return CallError(index, absl::StrCat("expected ", kToolCallClose, " right after the JSON object"));
    }
    ToolCall call;
    if (absl::Status st = ReadCall(index, *obj, &call); !st.ok()) return st;
    call.text_begin = open;
    call.text_end = after + kToolCallClose.size();
    pos = call.text_end;
    calls.push_back(std::move(call));
  }
  return calls;
}

}  // namespace kernelrl::agent
