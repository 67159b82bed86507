#include "agent/chat/tools.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kernelrl::agent {
namespace {

// The one definition of the tools. Descriptions are what the model reads.
constexpr absl::string_view kToolSchemasJson = R"json([
{"type": "function", "function": {"name": "Bash",
 "description": "Run a command in a persistent bash shell in the task workspace (working directory and variables carry over between calls; no network). Returns the exit status and the combined stdout and stderr (truncated if long). With run_in_background, starts the command as a background job and returns its bash_id at once.",
 "parameters": {"type": "object", "properties": {
   "command": {"type": "string", "description": "The command line to run."},
   "timeout_s": {"type": "integer", "minimum": 1, "description": "Seconds before the command is killed; the actor's default and cap apply when absent or larger."},
   "run_in_background": {"type": "boolean", "description": "Run as a background job; read its output with BashOutput, stop it with KillBash."}},
  "required": ["command"], "additionalProperties": false}}},
{"type": "function", "function": {"name": "BashOutput",
 "description": "Return the output a background job wrote since the last BashOutput call, and whether it is still running.",
 "parameters": {"type": "object", "properties": {
   "bash_id": {"type": "string", "description": "The id Bash returned for the job."}},
  "required": ["bash_id"], "additionalProperties": false}}},
{"type": "function", "function": {"name": "KillBash",
 "description": "Stop a background job.",
 "parameters": {"type": "object", "properties": {
   "bash_id": {"type": "string", "description": "The id Bash returned for the job."}},
  "required": ["bash_id"], "additionalProperties": false}}},
{"type": "function", "function": {"name": "Read",
 "description": "Read a text file from the workspace, with line numbers.",
 "parameters": {"type": "object", "properties": {
   "path": {"type": "string", "description": "File path, relative to the workspace root."},
   "offset": {"type": "integer", "minimum": 1, "description": "First line to return, 1-based (default 1)."},
   "limit": {"type": "integer", "minimum": 1, "description": "Maximum number of lines to return (default: to the end, capped by the actor)."}},
  "required": ["path"], "additionalProperties": false}}},
{"type": "function", "function": {"name": "Write",
 "description": "Create or overwrite a file in the workspace with the given content. An existing file must have been read (Read) first.",
 "parameters": {"type": "object", "properties": {
   "path": {"type": "string", "description": "File path, relative to the workspace root."},
   "content": {"type": "string", "description": "The complete new content of the file."}},
  "required": ["path", "content"], "additionalProperties": false}}},
{"type": "function", "function": {"name": "Edit",
 "description": "Replace one exact occurrence of a string in a file.",
 "parameters": {"type": "object", "properties": {
   "path": {"type": "string", "description": "File path, relative to the workspace root."},
   "old_string": {"type": "string", "description": "The exact text to replace; it must occur exactly once in the file."},
   "new_string": {"type": "string", "description": "The replacement text."}},
  "required": ["path", "old_string", "new_string"], "additionalProperties": false}}},
{"type": "function", "function": {"name": "MultiEdit",
 "description": "Apply several exact replacements to one file, in order, atomically: if any edit fails, the file is left unchanged.",
 "parameters": {"type": "object", "properties": {
   "path": {"type": "string", "description": "File path, relative to the workspace root."},
   "edits": {"type": "array", "minItems": 1, "description": "Replacements applied one after the other; each old_string must occur exactly once at the time it is applied.",
    "items": {"type": "object", "properties": {
      "old_string": {"type": "string"},
      "new_string": {"type": "string"}},
     "required": ["old_string", "new_string"], "additionalProperties": false}}},
  "required": ["path", "edits"], "additionalProperties": false}}},
{"type": "function", "function": {"name": "Glob",
 "description": "List workspace files whose paths match a glob pattern.",
 "parameters": {"type": "object", "properties": {
   "pattern": {"type": "string", "description": "Glob pattern relative to the workspace root, e.g. **/*.cu."}},
  "required": ["pattern"], "additionalProperties": false}}},
{"type": "function", "function": {"name": "Grep",
 "description": "Search file contents with a regular expression; returns matching lines with their file and line number.",
 "parameters": {"type": "object", "properties": {
   "pattern": {"type": "string", "description": "Regular expression (extended syntax)."},
   "path": {"type": "string", "description": "File or directory to search (default: the workspace root)."},
   "glob": {"type": "string", "description": "Only search files whose paths match this glob."}},
  "required": ["pattern"], "additionalProperties": false}}},
{"type": "function", "function": {"name": "TodoWrite",
 "description": "Replace your task list (a plan you keep for yourself); returns it.",
 "parameters": {"type": "object", "properties": {
   "todos": {"type": "array", "description": "The whole list, in order.",
    "items": {"type": "object", "properties": {
      "content": {"type": "string"},
      "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}},
     "required": ["content", "status"], "additionalProperties": false}}},
  "required": ["todos"], "additionalProperties": false}}},
{"type": "function", "function": {"name": "Compile",
 "description": "Build the workspace's kernels in the sandbox; returns the compiler diagnostics (file, line, message).",
 "parameters": {"type": "object", "properties": {}, "required": [], "additionalProperties": false}}},
{"type": "function", "function": {"name": "Verify",
 "description": "Compile and check ModelNew against Model on several secret input sets in the sandbox; returns the outcome and the first mismatch.",
 "parameters": {"type": "object", "properties": {}, "required": [], "additionalProperties": false}}},
{"type": "function", "function": {"name": "Profile",
 "description": "Compile, verify and time ModelNew in the sandbox; returns speed-ups over eager PyTorch and torch.compile, kernel coverage and the reward.",
 "parameters": {"type": "object", "properties": {}, "required": [], "additionalProperties": false}}}
])json";

const Json* FindSchema(absl::string_view name) {
  for (const Json& t : ToolSchemas()) {
    const Json* f = FindJson(t, "function");
    if (FindJson(*f, "name")->get<std::string>() == name) return FindJson(*f, "parameters");
  }
  return nullptr;
}

bool IsIntegerText(const Json& v) {
  return v.is_number_integer() && JsonInt(v).ok();
}

absl::Status Bad(absl::string_view tool, const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(tool, ": argument \"", path, "\" ", what));
}

absl::Status ValidateObject(absl::string_view tool, const std::string& prefix, const Json& schema, const Json& value);

// One value against its property schema; `path` names it for the model.
absl::Status ValidateValue(absl::string_view tool, const std::string& path, const Json& prop, const Json& value) {
  const std::string& type = FindJson(prop, "type")->get<std::string>();
  if (type == "string") {
    if (!value.is_string()) return Bad(tool, path, "must be a string");
    if (const Json* allowed = FindJson(prop, "enum"); allowed != nullptr) {
      std::vector<std::string> names;
      for (const Json& a : *allowed) {
        if (a == value) return absl::OkStatus();
        names.push_back(a.is_string() ? a.get<std::string>() : DumpJson(a));
      }
      return Bad(tool, path, absl::StrCat("must be one of ", absl::StrJoin(names, ", ")));
    }
  } else if (type == "integer") {
    if (!IsIntegerText(value)) return Bad(tool, path, "must be an integer");
    if (const Json* min = FindJson(prop, "minimum"); min != nullptr && *JsonInt(value) < *JsonInt(*min)) {
      return Bad(tool, path, absl::StrCat("must be >= ", *JsonInt(*min), ", got ", DumpJson(value)));
    }
  } else if (type == "boolean") {
    if (!value.is_boolean()) return Bad(tool, path, "must be true or false");
  } else if (type == "array") {
    if (!value.is_array()) return Bad(tool, path, "must be an array");
    if (const Json* min = FindJson(prop, "minItems");
        min != nullptr && static_cast<int64_t>(value.size()) < *JsonInt(*min)) {
      return Bad(tool, path, absl::StrCat("must have at least ", *JsonInt(*min), " item(s)"));
    }
    for (size_t i = 0; i < value.size(); ++i) {
      absl::Status s = ValidateValue(tool, absl::StrCat(path, "[", i + 1, "]"), *FindJson(prop, "items"), value[i]);
      if (!s.ok()) return s;
    }
  } else if (type == "object") {
    if (!value.is_object()) return Bad(tool, path, "must be an object");
    return ValidateObject(tool, path + ".", prop, value);
  }
  return absl::OkStatus();
}

// Keys of `value` against properties / required / additionalProperties.
absl::Status ValidateObject(absl::string_view tool, const std::string& prefix, const Json& schema, const Json& value) {
  const Json* props = FindJson(schema, "properties");
  absl::flat_hash_set<std::string> seen;
  for (const auto& [key, v] : value.items()) {
    const std::string path = prefix + key;
    if (!seen.insert(key).second) return Bad(tool, path, "is given twice");
    const Json* prop = FindJson(*props, key);
    if (prop == nullptr) {
      std::vector<std::string> allowed;
      for (const auto& p : props->items()) allowed.push_back(p.key());
      return absl::InvalidArgumentError(absl::StrCat(tool, ": unknown argument \"", path, "\"; allowed: ",
                                                     allowed.empty() ? "none" : absl::StrJoin(allowed, ", ")));
    }
    absl::Status s = ValidateValue(tool, path, *prop, v);
    if (!s.ok()) return s;
  }
  for (const Json& req : *FindJson(schema, "required")) {
    if (!seen.contains(req.get<std::string>())) {
      return absl::InvalidArgumentError(
          absl::StrCat(tool, ": missing required argument \"", prefix, req.get<std::string>(), "\""));
    }
  }
  return absl::OkStatus();
}

}  // namespace

const Json& ToolSchemas() {
  static const Json* schemas = [] {
    auto j = ParseJson(kToolSchemasJson);
    if (!j.ok()) std::abort();  // A literal in this file; the unit test parses it too.
    return new Json(*std::move(j));
  }();
  return *schemas;
}

const std::vector<std::string>& ToolNames() {
  static const auto* names = [] {
    auto* v = new std::vector<std::string>;
    for (const Json& t : ToolSchemas()) v->push_back(FindJson(*FindJson(t, "function"), "name")->get<std::string>());
    return v;
  }();
  return *names;
}

bool IsKnownTool(absl::string_view name) { return FindSchema(name) != nullptr; }

absl::Status ValidateToolArguments(absl::string_view name, const Json& arguments) {
  const Json* schema = FindSchema(name);
  if (schema == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown tool \"", name, "\"; the tools are ", absl::StrJoin(ToolNames(), ", ")));
  }
  if (!arguments.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": \"arguments\" must be a JSON object"));
  }
  return ValidateObject(name, "", *schema, arguments);
}

}  // namespace kernelrl::agent
