// ChatFormat against HF transformers' apply_chat_template (our template in
// testdata/make_chat_fixtures.py, a tokenizer trained at test time) on 80
// random conversations: text, ids and the assistant mask equal. Then turn
// ranges, hand-checked mask boundaries, sampled-ids splicing and the prefix
// property the actor relies on, and errors.
#include "agent/chat/chat_format.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "agent/chat/tool_calls.h"
#include "agent/chat/tools.h"
#include "common/json.h"
#include "common/file.h"
#include "agent/test_util.h"
#include "agent/tokenizer/unicode.h"

namespace kernelrl::agent {
namespace {

struct Fixture {
  Json data;
  std::unique_ptr<Tokenizer> tokenizer;
};

const Fixture& Fx() {
  static const Fixture* fx = [] {
    const std::string dir = testing::TempDir() + "/chat_fixtures";
    EXPECT_EQ(std::system(("mkdir -p '" + dir + "'").c_str()), 0);
    EXPECT_TRUE(WriteFileAtomically(dir + "/tools.json", DumpJson(ToolSchemas())).ok());
    EXPECT_EQ(testing::RunFixtureScript("agent/chat/testdata/make_chat_fixtures.py", dir), 0) << "see " << dir << ".log";
    auto* f = new Fixture;
    auto text = ReadFileToString(dir + "/chat_fixtures.json");
    EXPECT_TRUE(text.ok()) << text.status();
    auto j = ParseJson(text.ok() ? *text : "{}");
    EXPECT_TRUE(j.ok()) << j.status();
    f->data = *j;
    auto tok = Tokenizer::Load(FindJson(f->data, "tokenizer") ? FindJson(f->data, "tokenizer")->get<std::string>() : "");
    EXPECT_TRUE(tok.ok()) << tok.status();
    if (tok.ok()) f->tokenizer = *std::move(tok);
    return f;
  }();
  return *fx;
}

std::vector<int32_t> Ints(const Json& arr) {
  std::vector<int32_t> v;
  for (const Json& x : arr) v.push_back(static_cast<int32_t>(*JsonInt(x)));
  return v;
}

// HF message dicts -> our turns.
std::vector<ChatTurn> ToTurns(const Json& messages) {
  std::vector<ChatTurn> turns;
  for (const Json& m : messages) {
    ChatTurn t;
    const std::string& role = FindJson(m, "role")->get<std::string>();
    t.role = role == "system" ? ChatRole::kSystem : role == "user" ? ChatRole::kUser
             : role == "assistant"  ? ChatRole::kAssistant : ChatRole::kTool;
    if (const Json* c = FindJson(m, "content"); c != nullptr && c->is_string()) t.content = c->get<std::string>();
    if (const Json* calls = FindJson(m, "tool_calls"); calls != nullptr) {
      for (const Json& c : *calls) {
        const Json* f = FindJson(c, "function");
        t.tool_calls.push_back(ToolCallSpec{FindJson(*f, "name")->get<std::string>(), *FindJson(*f, "arguments")});
      }
    }
    turns.push_back(std::move(t));
  }
  return turns;
}

ChatFormat MakeFormat(bool tools) {
  auto f = ChatFormat::Create(Fx().tokenizer.get(), tools ? ToolSchemas() : Json::array());
  EXPECT_TRUE(f.ok()) << f.status();
  return *std::move(f);
}

TEST(ChatFormatTest, EqualsHuggingFaceApplyChatTemplate) {
  const Fixture& fx = Fx();
  ASSERT_NE(fx.tokenizer, nullptr);
  const ChatFormat with_tools = MakeFormat(true), without = MakeFormat(false);
  const Json& convs = *FindJson(fx.data, "conversations");
  ASSERT_GE(convs.size(), 50u);
  int tool_calls = 0, mismatches = 0;
  for (size_t i = 0; i < convs.size(); ++i) {
    const Json& c = convs[i];
    const std::vector<ChatTurn> turns = ToTurns(*FindJson(c, "messages"));
    const bool gen = FindJson(c, "add_generation_prompt")->get<bool>();
    auto r = (FindJson(c, "tools")->get<bool>() ? with_tools : without).Render(turns, gen);
    ASSERT_TRUE(r.ok()) << "conversation " << i << ": " << r.status();
    const bool same = r->text == FindJson(c, "text")->get<std::string>() && r->ids == Ints(*FindJson(c, "ids")) &&
                      r->loss_mask == Ints(*FindJson(c, "assistant_mask"));
    if (!same && ++mismatches <= 3) {
      EXPECT_EQ(r->text, FindJson(c, "text")->get<std::string>()) << "conversation " << i;
      EXPECT_EQ(r->ids, Ints(*FindJson(c, "ids"))) << "conversation " << i;
      EXPECT_EQ(r->loss_mask, Ints(*FindJson(c, "assistant_mask"))) << "conversation " << i;
    }
    // Turn ranges: contiguous from the prelude to the generation prompt, each
    // one whole message whose tokens decode to its text.
    ASSERT_EQ(r->turns.size(), turns.size());
    int32_t at = r->prelude_end;
    for (size_t t = 0; t < turns.size(); ++t) {
      const TurnSpan& s = r->turns[t];
      EXPECT_EQ(s.token_begin, at);
      at = s.token_end;
      EXPECT_EQ(r->ids[s.token_begin], fx.tokenizer->TokenId("<|im_start|>"));
      const std::vector<int32_t> span(r->ids.begin() + s.token_begin, r->ids.begin() + s.token_end);
      EXPECT_EQ(fx.tokenizer->Decode(span), NormalizeNfc(r->text.substr(s.text_begin, s.text_end - s.text_begin)));
      for (const ToolCallSpec& call : turns[t].tool_calls) {
        EXPECT_TRUE(ValidateToolArguments(call.name, call.arguments).ok());
        ++tool_calls;
      }
      // Parsing the rendered calls back gives the same calls (when the free
      // text around them holds no tags of its own).
      if (!turns[t].tool_calls.empty() && !absl::StrContains(turns[t].content, "tool_call>")) {
        auto parsed = ParseToolCalls(r->text.substr(s.text_begin, s.text_end - s.text_begin));
        ASSERT_TRUE(parsed.ok()) << "conversation " << i << " turn " << t << ": " << parsed.status();
        ASSERT_EQ(parsed->size(), turns[t].tool_calls.size());
        for (size_t k = 0; k < parsed->size(); ++k) {
          EXPECT_EQ((*parsed)[k].name, turns[t].tool_calls[k].name);
          EXPECT_EQ((*parsed)[k].arguments_json, PythonJsonDumps(turns[t].tool_calls[k].arguments));
        }
      }
    }
    EXPECT_EQ(static_cast<size_t>(at) + (gen ? with_tools.generation_prompt_ids().size() : 0), r->ids.size());
  }
  EXPECT_EQ(mismatches, 0) << "of " << convs.size();
  EXPECT_GT(tool_calls, 40);
}

// Positions (relative to `begin`) where the mask is 1.
std::vector<int> MaskedPositions(const RenderedChat& r, const TurnSpan& s) {
  std::vector<int> pos;
  for (int32_t k = s.token_begin; k < s.token_end; ++k) {
    if (r.loss_mask[k]) pos.push_back(k - s.token_begin);
  }
  return pos;
}

TEST(ChatFormatTest, MaskCoversAssistantBodyAndImEndOnly) {
  ASSERT_NE(Fx().tokenizer, nullptr) << "fixture failed";
  const Tokenizer& tok = *Fx().tokenizer;
  const ChatFormat f = MakeFormat(true);
  const std::string body = "I'll read it.\n" + FormatToolCall("Read", ParseJson(R"({"path": "model.py"})").value());
  auto r = f.Render({{ChatRole::kSystem, "Write fast kernels."},
                     {ChatRole::kUser, "Task: relu"},
                     {ChatRole::kAssistant, body},
                     {ChatRole::kTool, "class Model: ..."}},
                    /*add_generation_prompt=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  // Everything outside the assistant turn is 0.
  for (int t : {0, 1, 3}) EXPECT_TRUE(MaskedPositions(*r, r->turns[t]).empty()) << t;
  const TurnSpan& a = r->turns[2];
  // By hand: <|im_start|> "assistant\n" | body | <|im_end|> | "\n".
  const std::vector<int32_t> header = tok.Encode("<|im_start|>assistant\n");
  const std::vector<int32_t> body_ids = tok.Encode(body);
  std::vector<int32_t> want = header;
  want.insert(want.end(), body_ids.begin(), body_ids.end());
  want.push_back(f.im_end_id());
  for (int32_t id : tok.Encode("\n")) want.push_back(id);
  EXPECT_EQ(std::vector<int32_t>(r->ids.begin() + a.token_begin, r->ids.begin() + a.token_end), want);
  std::vector<int> want_pos;
  for (size_t k = header.size(); k <= header.size() + body_ids.size(); ++k) want_pos.push_back(static_cast<int>(k));
  EXPECT_EQ(MaskedPositions(*r, a), want_pos);
  EXPECT_EQ(r->ids[a.token_begin + want_pos.back()], f.im_end_id());
  // The prompt ends with the generation prompt, unmasked.
  EXPECT_TRUE(absl::EndsWith(r->text, "<|im_start|>assistant\n"));
  for (size_t k = r->ids.size() - header.size(); k < r->ids.size(); ++k) EXPECT_EQ(r->loss_mask[k], 0);
}

TEST(ChatFormatTest, MaskStartsAtTokenHoldingFirstBodyByte) {
  ASSERT_NE(Fx().tokenizer, nullptr) << "fixture failed";
  // "\n\n\nx": the header's "\n" and the body's newlines pre-tokenize as one
  // piece; the straddling token counts as generated (as in HF's mask).
  const Tokenizer& tok = *Fx().tokenizer;
  const ChatFormat f = MakeFormat(false);
  auto r = f.Render({{ChatRole::kUser, "q"}, {ChatRole::kAssistant, "\n\n\nx"}}, false);
  ASSERT_TRUE(r.ok()) << r.status();
  const TurnSpan& a = r->turns[1];
  const std::vector<int> pos = MaskedPositions(*r, a);
  ASSERT_FALSE(pos.empty());
  const std::vector<int32_t> before(r->ids.begin() + a.token_begin, r->ids.begin() + a.token_begin + pos[0]);
  const std::string head = tok.Decode(before);
  const std::string with_first = tok.Decode({before.begin(), before.end()}) + tok.Decode({r->ids[a.token_begin + pos[0]]});
  EXPECT_TRUE(absl::StartsWith("<|im_start|>assistant\n", head)) << head;
  EXPECT_GT(with_first.size(), std::string("<|im_start|>assistant\n").size());
  for (size_t k = 1; k < pos.size(); ++k) EXPECT_EQ(pos[k], pos[k - 1] + 1);  // One contiguous run.
  EXPECT_EQ(r->ids[a.token_begin + pos.back()], f.im_end_id());
  // Empty body: only <|im_end|> is masked.
  auto e = f.Render({{ChatRole::kUser, "q"}, {ChatRole::kAssistant, ""}}, false);
  ASSERT_TRUE(e.ok());
  const std::vector<int> only = MaskedPositions(*e, e->turns[1]);
  ASSERT_EQ(only.size(), 1u);
  EXPECT_EQ(e->ids[e->turns[1].token_begin + only[0]], f.im_end_id());
}

TEST(ChatFormatTest, SampledIdsAreSplicedAndThePromptIsAPrefix) {
  ASSERT_NE(Fx().tokenizer, nullptr) << "fixture failed";
  const Tokenizer& tok = *Fx().tokenizer;
  const ChatFormat f = MakeFormat(true);
  std::vector<ChatTurn> turns = {{ChatRole::kSystem, "sys"}, {ChatRole::kUser, "Task: add two tensors"}};
  auto prompt = f.Render(turns, /*add_generation_prompt=*/true);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  // "Sampled" ids that a joint tokenization would not give: the text in
  // pieces, each encoded alone.
  std::vector<int32_t> sampled;
  std::string text;
  for (absl::string_view piece : {"\n", "\nLet", " me", " look", ".\n",
                                  "<tool_call>", "\n{\"name\": \"Glob\", \"arguments\": {\"pattern\": \"*\"}}\n",
                                  "</tool_call>"}) {
    for (int32_t id : tok.Encode(piece)) sampled.push_back(id);
    text += std::string(piece);
  }
  ASSERT_NE(sampled, tok.Encode(text));  // Otherwise this test checks nothing.
  sampled.push_back(f.im_end_id());
  ChatTurn a{ChatRole::kAssistant, text};
  a.generated_ids = sampled;
  turns.push_back(a);
  turns.push_back({ChatRole::kTool, "model.py\n"});
  auto full = f.Render(turns, true);
  ASSERT_TRUE(full.ok()) << full.status();
  ASSERT_GE(full->ids.size(), prompt->ids.size());
  EXPECT_TRUE(std::equal(prompt->ids.begin(), prompt->ids.end(), full->ids.begin()));
  EXPECT_TRUE(absl::StartsWith(full->text, prompt->text));
  // The sampled ids follow the prompt verbatim, all masked; then "\n", unmasked.
  const size_t p = prompt->ids.size();
  EXPECT_EQ(std::vector<int32_t>(full->ids.begin() + p, full->ids.begin() + p + sampled.size()), sampled);
  for (size_t k = 0; k < full->ids.size(); ++k) {
    EXPECT_EQ(full->loss_mask[k], k >= p && k < p + sampled.size() ? 1 : 0) << k;
  }
  EXPECT_EQ(full->turns[2].token_begin, static_cast<int32_t>(p - f.generation_prompt_ids().size()));
  auto calls = ParseToolCalls(text);
  ASSERT_TRUE(calls.ok()) << calls.status();
  EXPECT_EQ((*calls)[0].name, "Glob");

  // Cut off by max_tokens: <|im_end|> is appended, unmasked.
  turns[2].generated_ids->pop_back();
  turns.resize(3);
  auto cut = f.Render(turns, false);
  ASSERT_TRUE(cut.ok()) << cut.status();
  const TurnSpan& s = cut->turns[2];
  EXPECT_EQ(cut->ids[s.token_end - 1 - tok.Encode("\n").size()], f.im_end_id());
  EXPECT_EQ(cut->loss_mask[s.token_end - 1 - tok.Encode("\n").size()], 0);
  EXPECT_EQ(static_cast<size_t>(MaskedPositions(*cut, s).size()), sampled.size() - 1);
}

TEST(ChatFormatTest, InvalidConversationsAreRejected) {
  ASSERT_NE(Fx().tokenizer, nullptr) << "fixture failed";
  const ChatFormat f = MakeFormat(true);
  EXPECT_FALSE(f.Render({{ChatRole::kUser, "a"}, {ChatRole::kSystem, "late"}}, false).ok());
  ChatTurn user{ChatRole::kUser, "x"};
  user.tool_calls.push_back({"Glob", ParseJson(R"({"pattern": "*"})").value()});
  EXPECT_FALSE(f.Render({user}, false).ok());
  ChatTurn a{ChatRole::kAssistant, "not what was sampled"};
  a.generated_ids = Fx().tokenizer->Encode("hello");
  auto r = f.Render({{ChatRole::kUser, "q"}, a}, false);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "turn 1: assistant content differs")) << r.status();
  a.content.clear();
  a.generated_ids->insert(a.generated_ids->begin(), f.im_end_id());
  EXPECT_FALSE(f.Render({{ChatRole::kUser, "q"}, a}, false).ok());
  EXPECT_FALSE(ChatFormat::Create(nullptr, ToolSchemas()).ok());
  EXPECT_FALSE(ChatFormat::Create(Fx().tokenizer.get(), Json("x")).ok());
}

}  // namespace
}  // namespace kernelrl::agent
