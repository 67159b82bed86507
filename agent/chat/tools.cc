#include "agent/chat/tools.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kernelrl::agent {
namespace {

// The one definition of the tools. Descriptions are what the model reads.
constexpr absl::string_view kToolSchemasJson = R"json([
{"type": "function", "function": {"name": "Bash",
 "description": "Run a shell command (bash -c) in the task workspace. Returns the exit status, stdout and stderr (truncated if long).",
 "parameters": {"type": "object", "properties": {
   "command": {"type": "string", "description": "The command line to run."},
   "timeout_s": {"type": "integer", "minimum": 1, "description": "Seconds before the command is killed; the actor's default and cap apply when absent or larger."}},
  "required": ["command"], "additionalProperties": false}}},
{"type": "function", "function": {"name": "Read",
 "description": "Read a text file from the workspace, with line numbers.",
 "parameters": {"type": "object", "properties": {
   "path": {"type": "string", "description": "File path, relative to the workspace root."},
   "offset": {"type": "integer", "minimum": 1, "description": "First line to return, 1-based (default 1)."},
   "limit": {"type": "integer", "minimum": 1, "description": "Maximum number of lines to return (default: to the end, capped by the actor)."}},
  "required": ["path"], "additionalProperties": false}}},
{"type": "function", "function": {"name": "Write",
 "description": "Create or overwrite a file in the workspace with the given content.",
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
  "required": ["pattern"], "additionalProperties": false}}}
])json";

const Json* FindSchema(absl::string_view name) {
  for (const Json& t : ToolSchemas().items()) {
    const Json* f = t.Find("function");
    if (f->Find("name")->str() == name) return f->Find("parameters");
  }
  return nullptr;
}

bool IsIntegerText(const Json& v) {
  return v.is_number() && v.str().find_first_of(".eE") == std::string::npos && v.AsInt().ok();
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
    for (const Json& t : ToolSchemas().items()) v->push_back(t.Find("function")->Find("name")->str());
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
  const Json* props = schema->Find("properties");
  absl::flat_hash_set<std::string> seen;
  for (const auto& [key, value] : arguments.members()) {
    if (!seen.insert(key).second) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": argument \"", key, "\" is given twice"));
    }
    const Json* prop = props->Find(key);
    if (prop == nullptr) {
      std::vector<std::string> allowed;
      for (const auto& p : props->members()) allowed.push_back(p.first);
      return absl::InvalidArgumentError(absl::StrCat(name, ": unknown argument \"", key, "\"; allowed: ",
                                                     absl::StrJoin(allowed, ", ")));
    }
    const std::string& type = prop->Find("type")->str();
    if (type == "string" && !value.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": argument \"", key, "\" must be a string"));
    }
    if (type == "integer") {
      if (!IsIntegerText(value)) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": argument \"", key, "\" must be an integer"));
      }
      if (const Json* min = prop->Find("minimum"); min != nullptr && *value.AsInt() < *min->AsInt()) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": argument \"", key, "\" must be >= ", *min->AsInt(), ", got ", value.str()));
      }
    }
  }
  for (const Json& req : schema->Find("required")->items()) {
    if (!seen.contains(req.str())) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": missing required argument \"", req.str(), "\""));
    }
  }
  return absl::OkStatus();
}

}  // namespace kernelrl::agent
