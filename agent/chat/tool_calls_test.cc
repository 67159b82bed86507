// ParseToolCalls / FormatToolCall / the tool schemas on adversarial text:
// braces and tags inside strings, unicode escapes, several calls, text
// around calls, every truncation of a valid reply, random corruption.
#include "agent/chat/tool_calls.h"

#include <random>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "agent/chat/tools.h"

namespace kernelrl::agent {
namespace {

Json Args(absl::string_view json) {
  auto j = ParseJson(json);
  EXPECT_TRUE(j.ok()) << j.status();
  return *j;
}

// The error message of parsing `text` (fails the test if it parsed).
std::string ErrorOf(absl::string_view text) {
  auto r = ParseToolCalls(text);
  EXPECT_FALSE(r.ok()) << "parsed: " << text;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(r.status().message());
}

TEST(ToolSchemasTest, SixToolsEachRequiredArgumentIsAProperty) {
  EXPECT_EQ(ToolNames(), (std::vector<std::string>{"Bash", "BashOutput", "KillBash", "Read", "Write", "Edit", "MultiEdit",
                                                   "Glob", "Grep", "TodoWrite", "Compile", "Verify", "Profile"}));
  for (const Json& t : ToolSchemas()) {
    EXPECT_EQ(FindJson(t, "type")->get<std::string>(), "function");
    const Json* params = FindJson(*FindJson(t, "function"), "parameters");
    ASSERT_NE(params, nullptr);
    EXPECT_FALSE(FindJson(*params, "additionalProperties")->get<bool>());
    for (const Json& req : *FindJson(*params, "required")) {
      EXPECT_NE(FindJson(*FindJson(*params, "properties"), req.get<std::string>()), nullptr) << req.get<std::string>();
    }
    EXPECT_FALSE(FindJson(*FindJson(t, "function"), "description")->get<std::string>().empty());
  }
  EXPECT_TRUE(ValidateToolArguments("Edit", Args(R"({"path": "a", "old_string": "x", "new_string": ""})")).ok());
  EXPECT_TRUE(ValidateToolArguments("Read", Args(R"({"path": "k.cu", "offset": 1, "limit": 40})")).ok());
  EXPECT_TRUE(ValidateToolArguments("Grep", Args(R"({"pattern": "__global__"})")).ok());
}

TEST(PythonJsonDumpsTest, MatchesJsonDumpsEnsureAsciiFalse) {
  // json.dumps({"a": [1, 2.5, None, True], "b": "é\n\"\\\x01", "c": {}}, ensure_ascii=False)
  EXPECT_EQ(PythonJsonDumps(Args(R"({"a":[1,2.5,null,true],"b":"\u00e9\n\"\\\u0001","c":{}})")),
            "{\"a\": [1, 2.5, null, true], \"b\": \"\xC3\xA9\\n\\\"\\\\\\u0001\", \"c\": {}}");
}

TEST(ParseToolCallsTest, NoCallsInPlainText) {
  auto r = ParseToolCalls("I will think first. {\"name\": \"Bash\"} is not a call without tags.");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->empty());
  EXPECT_TRUE(ParseToolCalls("").ok());
}

TEST(ParseToolCallsTest, FormatRoundTripsWithTextAround) {
  const Json args = Args(R"({"command": "nvcc -O3 -arch=sm_90 k.cu && ./a.out", "timeout_s": 120})");
  const std::string block = FormatToolCall("Bash", args);
  EXPECT_EQ(block,
            "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"nvcc -O3 -arch=sm_90 k.cu && "
            "./a.out\", \"timeout_s\": 120}}\n</tool_call>");
  const std::string text = "Let me compile.\n" + block + "\nWaiting.";
  auto r = ParseToolCalls(text);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].name, "Bash");
  EXPECT_EQ((*r)[0].arguments_json, PythonJsonDumps(args));
  EXPECT_EQ(text.substr((*r)[0].text_begin, (*r)[0].text_end - (*r)[0].text_begin), block);
}

TEST(ParseToolCallsTest, BracesTagsAndQuotesInsideStrings) {
  const std::string code = "__global__ void k() { if (x) { y = \"}\"; } }\n// </tool_call> <tool_call> {{";
  Json args = Json::object({{"path", Json("k.cu")}, {"content", Json(code)}});
  auto r = ParseToolCalls("x " + FormatToolCall("Write", args) + " y");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ(FindJson((*r)[0].arguments, "content")->get<std::string>(), code);
}

TEST(ParseToolCallsTest, UnicodeEscapesAndRawUtf8) {
  auto r = ParseToolCalls(
      "<tool_call>{\"name\": \"Grep\", \"arguments\": {\"pattern\": \"caf\\u00e9|\\ud83d\\ude00\", \"glob\": "
      "\"*.\xE6\x97\xA5\"}}</tool_call>");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ(FindJson((*r)[0].arguments, "pattern")->get<std::string>(), "caf\xC3\xA9|\xF0\x9F\x98\x80");
  EXPECT_EQ(FindJson((*r)[0].arguments, "glob")->get<std::string>(), "*.\xE6\x97\xA5");
  // Canonical form keeps non-ASCII as UTF-8 (ensure_ascii=False).
  EXPECT_EQ((*r)[0].arguments_json, "{\"pattern\": \"caf\xC3\xA9|\xF0\x9F\x98\x80\", \"glob\": \"*.\xE6\x97\xA5\"}");
}

TEST(ParseToolCallsTest, TwoCallsInOneTurnInOrder) {
  const std::string a = FormatToolCall("Read", Args(R"({"path": "model.py"})"));
  const std::string b = FormatToolCall("Glob", Args(R"({"pattern": "**/*.cu"})"));
  auto r = ParseToolCalls("First:\n" + a + "\nthen\n" + b);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].name, "Read");
  EXPECT_EQ((*r)[1].name, "Glob");
  EXPECT_LT((*r)[0].text_end, (*r)[1].text_begin);
}

TEST(ParseToolCallsTest, DoubleEncodedArgumentsAccepted) {
  auto r = ParseToolCalls(R"(<tool_call>{"name": "Glob", "arguments": "{\"pattern\": \"*.py\"}"}</tool_call>)");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].arguments_json, R"({"pattern": "*.py"})");
  EXPECT_TRUE(absl::StrContains(
      ErrorOf(R"(<tool_call>{"name": "Glob", "arguments": "*.py"}</tool_call>)"), "not a JSON object"));
}

TEST(ToolsTest, NestedArgumentsAreValidated) {
  EXPECT_TRUE(ValidateToolArguments("MultiEdit", Args(R"({"path": "k.cu", "edits": [{"old_string": "a", "new_string": "b"}]})")).ok());
  EXPECT_TRUE(ValidateToolArguments("TodoWrite", Args(R"({"todos": []})")).ok());
  EXPECT_TRUE(ValidateToolArguments("Bash", Args(R"({"command": "sleep 9", "run_in_background": true})")).ok());
  EXPECT_TRUE(ValidateToolArguments("Profile", Args("{}")).ok());
  auto error = [](absl::string_view tool, absl::string_view args) {
    return std::string(ValidateToolArguments(tool, Args(args)).message());
  };
  EXPECT_EQ(error("MultiEdit", R"({"path": "k.cu", "edits": []})"),
            "MultiEdit: argument \"edits\" must have at least 1 item(s)");
  EXPECT_EQ(error("MultiEdit", R"({"path": "k.cu", "edits": [{"old_string": "a", "new_string": "b"}, {"old_string": 1, "new_string": "c"}]})"),
            "MultiEdit: argument \"edits[2].old_string\" must be a string");
  EXPECT_EQ(error("MultiEdit", R"({"path": "k.cu", "edits": [{"old_string": "a"}]})"),
            "MultiEdit: missing required argument \"edits[1].new_string\"");
  EXPECT_EQ(error("MultiEdit", R"({"path": "k.cu", "edits": "a->b"})"), "MultiEdit: argument \"edits\" must be an array");
  EXPECT_EQ(error("TodoWrite", R"({"todos": [{"content": "x", "status": "done"}]})"),
            "TodoWrite: argument \"todos[1].status\" must be one of pending, in_progress, completed");
  EXPECT_EQ(error("TodoWrite", R"({"todos": [7]})"), "TodoWrite: argument \"todos[1]\" must be an object");
  EXPECT_EQ(error("Bash", R"({"command": "ls", "run_in_background": "yes"})"),
            "Bash: argument \"run_in_background\" must be true or false");
  EXPECT_EQ(error("Verify", R"({"fast": true})"), "Verify: unknown argument \"fast\"; allowed: none");
}

TEST(ParseToolCallsTest, SchemaViolationsAreNamed) {
  auto call = [](absl::string_view name, absl::string_view args) {
    return absl::StrCat("<tool_call>\n{\"name\": \"", name, "\", \"arguments\": ", args, "}\n</tool_call>");
  };
  EXPECT_TRUE(absl::StrContains(ErrorOf(call("bash", R"({"command": "ls"})")), "unknown tool \"bash\"; the tools are Bash, BashOutput, KillBash, Read"));
  EXPECT_TRUE(absl::StrContains(ErrorOf(call("Edit", R"({"path": "a", "new_string": "b"})")),
                                "Edit: missing required argument \"old_string\""));
  EXPECT_TRUE(absl::StrContains(ErrorOf(call("Bash", R"({"command": "ls", "cwd": "/"})")), "unknown argument \"cwd\""));
  EXPECT_TRUE(absl::StrContains(ErrorOf(call("Bash", R"({"command": ["ls"]})")), "\"command\" must be a string"));
  EXPECT_TRUE(absl::StrContains(ErrorOf(call("Bash", R"({"command": "ls", "timeout_s": 1.5})")), "must be an integer"));
  EXPECT_TRUE(absl::StrContains(ErrorOf(call("Bash", R"({"command": "ls", "timeout_s": "10"})")), "must be an integer"));
  EXPECT_TRUE(absl::StrContains(ErrorOf(call("Read", R"({"path": "a", "offset": 0})")), "\"offset\" must be >= 1"));
  EXPECT_TRUE(absl::StrContains(ErrorOf(call("Bash", R"({"command": "ls", "command": "rm -rf /"})")), "given twice"));
  EXPECT_TRUE(absl::StrContains(ErrorOf(call("Bash", R"(["ls"])")), "must be a JSON object"));
  EXPECT_TRUE(absl::StrContains(ErrorOf(R"(<tool_call>{"arguments": {}}</tool_call>)"), "\"name\""));
  EXPECT_TRUE(absl::StrContains(ErrorOf(R"(<tool_call>{"name": "Bash"}</tool_call>)"), "\"arguments\" is missing"));
  EXPECT_TRUE(absl::StrContains(ErrorOf(R"(<tool_call>{"name": "Bash", "name": "Read", "arguments": {}}</tool_call>)"),
                                "given twice"));
  EXPECT_TRUE(absl::StrContains(ErrorOf(R"(<tool_call>{"name": "Glob", "arguments": {"pattern": "*"}, "id": 1}</tool_call>)"),
                                "unexpected key \"id\""));
  // The second call is the broken one: the message says which.
  EXPECT_TRUE(absl::StartsWith(
      ErrorOf(FormatToolCall("Glob", Args(R"({"pattern": "*"})")) + call("Glob", "{}")), "tool call 2: "));
}

TEST(ParseToolCallsTest, MalformedBlocks) {
  EXPECT_TRUE(absl::StrContains(ErrorOf("<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"ls\"}\n</tool_call>"),
                                "invalid JSON"));
  EXPECT_TRUE(absl::StrContains(ErrorOf("<tool_call>\n{\"name\": 'Bash'}\n</tool_call>"), "invalid JSON"));
  EXPECT_TRUE(absl::StrContains(ErrorOf("<tool_call>\nBash ls\n</tool_call>"), "expected a JSON object"));
  EXPECT_TRUE(absl::StrContains(ErrorOf("done </tool_call>"), "without an opening"));
  EXPECT_TRUE(absl::StrContains(
      ErrorOf("<tool_call>{\"name\": \"Glob\", \"arguments\": {\"pattern\": \"*\"}} trailing</tool_call>"),
      "right after the JSON object"));
  EXPECT_TRUE(absl::StrContains(ErrorOf("<tool_call>"), "cut off"));
}

TEST(ParseToolCallsTest, EveryTruncationIsOkOrAClearError) {
  const std::string a = FormatToolCall("Edit", Args(R"({"path": "k.cu", "old_string": "a\n}", "new_string": "\"b\""})"));
  const std::string b = FormatToolCall("Bash", Args(R"({"command": "make -j && ./bench", "timeout_s": 300})"));
  const std::string text = "Plan:\n" + a + "\n" + b + "\n";
  const size_t a_end = text.find(a) + a.size();
  const size_t b_begin = text.find(b);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    auto r = ParseToolCalls(absl::string_view(text).substr(0, cut));
    const size_t want = cut < a_end ? 0 : cut < b_begin + b.size() ? 1 : 2;
    // A cut inside the opening tag leaves plain text ("<tool_" is not a call).
    const size_t open = kToolCallOpen.size();
    const bool inside_call = (cut >= text.find(a) + open && cut < a_end) || (cut >= b_begin + open && cut < b_begin + b.size());
    if (!inside_call) {
      ASSERT_TRUE(r.ok()) << "cut " << cut << ": " << r.status();
      EXPECT_EQ(r->size(), want) << "cut " << cut;
    } else {
      ASSERT_FALSE(r.ok()) << "cut " << cut;
      EXPECT_TRUE(absl::StrContains(r.status().message(), "cut off")) << "cut " << cut << ": " << r.status();
    }
  }
}

TEST(ParseToolCallsTest, RandomCorruptionNeverCrashes) {
  const std::string good = "x\n" + FormatToolCall("Write", Args(R"({"path": "a.cu", "content": "int main() { return 0; }"})")) +
                           "\n" + FormatToolCall("Grep", Args(R"({"pattern": "\\bfoo\\b", "path": "src"})"));
  std::mt19937 rng(12345);
  const std::string alphabet = "{}[]\":,\\<>/ \nabc\x01\xC3\xA9\xFF";
  int ok = 0, errors = 0;
  for (int i = 0; i < 5000; ++i) {
    std::string s = good;
    for (int k = 0, n = 1 + rng() % 4; k < n; ++k) {
      const size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0: s[at] = alphabet[rng() % alphabet.size()]; break;
        case 1: s.erase(at, 1 + rng() % 8); break;
        default: s.insert(at, 1, alphabet[rng() % alphabet.size()]);
      }
    }
    auto r = ParseToolCalls(s);
    if (r.ok()) {
      ++ok;
      for (const ToolCall& c : *r) EXPECT_TRUE(ValidateToolArguments(c.name, c.arguments).ok());
    } else {
      ++errors;
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_TRUE(absl::StartsWith(r.status().message(), "tool call ")) << r.status();
    }
  }
  EXPECT_GT(ok, 0);
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace kernelrl::agent
