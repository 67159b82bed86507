// The OpenAI-compatible API over HTTP against a real engine (tiny random
// Qwen2 on CPU): what /v1/completions and /v1/chat/completions return equals
// the engine's own greedy generation (ids, log-probs, version), streamed
// chunks add up to the plain response, chat prompts are ChatFormat's
// rendering, and every bad request gets OpenAI's error shape and status.
#include <algorithm>
#include <map>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "httplib.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "agent/chat/chat_format.h"
#include "agent/chat/tools.h"
#include "learner/policy/openai_server_protocol.h"
#include "learner/policy/openai_server_test_util.h"

namespace kernelrl::learner {
namespace {

using testing::Fixture;

std::mt19937 Rng() {
  const unsigned seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  return std::mt19937(seed);
}

struct Reply {
  int status = 0;
  Json json;
  std::string body;
};

Reply Call(const std::string& method, const std::string& path, const std::string& body = "") {
  httplib::Client c("127.0.0.1", Fixture().port);
  c.set_read_timeout(120, 0);
  httplib::Result r = method == "GET" ? c.Get(path) : c.Post(path, body, "application/json");
  EXPECT_TRUE(r) << httplib::to_string(r.error());
  Reply out;
  if (!r) return out;
  out.status = r->status;
  out.body = r->body;
  if (r->get_header_value("Content-Type") == "application/json") out.json = *ParseJson(r->body);
  return out;
}

Reply Post(const std::string& path, const Json& body) { return Call("POST", path, DumpJson(body)); }

std::vector<int32_t> Ids(const Json* a) {
  std::vector<int32_t> ids;
  if (a == nullptr) return ids;
  for (const Json& v : *a) ids.push_back(static_cast<int32_t>(*JsonInt(v)));
  return ids;
}

Json IdArray(const std::vector<int32_t>& ids) {
  Json a = Json::array();
  for (int32_t id : ids) a.push_back(Json(id));
  return a;
}

// SSE payloads of a streamed response ("[DONE]" included).
std::vector<std::string> Events(const std::string& body) {
  std::vector<std::string> out;
  for (absl::string_view frame : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(frame, "data: ")) << frame;
    out.emplace_back(frame.substr(6));
  }
  return out;
}

void ExpectError(const Reply& r, int status, const std::string& type, const std::string& param) {
  EXPECT_EQ(r.status, status) << r.body;
  const Json* e = FindJson(r.json, "error");
  ASSERT_NE(e, nullptr) << r.body;
  EXPECT_FALSE(GetJsonString(*e, "message", "").value().empty());
  EXPECT_EQ(GetJsonString(*e, "type", "").value(), type) << r.body;
  const Json* p = FindJson(*e, "param");
  ASSERT_NE(p, nullptr);
  if (param.empty()) {
    EXPECT_TRUE(p->is_null()) << r.body;
  } else {
    EXPECT_EQ(p->get<std::string>(), param) << r.body;
  }
}

TEST(OpenAIServerTest, ModelsListsTheServedModelWithItsVersion) {
  Reply r = Call("GET", "/v1/models");
  ASSERT_EQ(r.status, 200) << r.body;
  const Json& m = FindJson(r.json, "data")->at(0);
  EXPECT_EQ(GetJsonString(m, "id", "").value(), testing::kModelName);
  EXPECT_EQ(GetJsonInt(m, "policy_version", -1).value(), testing::kPolicyVersion);
  EXPECT_EQ(GetJsonInt(m, "max_model_len", -1).value(), testing::kMaxSeqLen);
  EXPECT_EQ(Call("GET", std::string("/v1/models/") + testing::kModelName).status, 200);
  Reply missing = Call("GET", "/v1/models/gpt-9");
  ExpectError(missing, 404, "not_found_error", "model");
  EXPECT_EQ(GetJsonString(*FindJson(missing.json, "error"), "code", "").value(), "model_not_found");
}

TEST(OpenAIServerTest, CompletionsReturnTheEnginesIdsLogprobsAndVersion) {
  std::mt19937 rng = Rng();
  for (int round = 0; round < 3; ++round) {
    const std::vector<int32_t> prompt = testing::RandomIds(&rng, 4, 60);
    const int max_tokens = std::uniform_int_distribution<int>(1, 24)(rng);
    const GenerationResult want = testing::EngineGreedy(prompt, max_tokens);
    Json body = Json::object({{"model", Json(testing::kModelName)},
                              {"prompt", IdArray(prompt)},
                              {"max_tokens", Json(max_tokens)},
                              {"temperature", Json(0)},
                              {"logprobs", Json(0)},
                              {"return_token_ids", Json(true)},
                              {"return_tokens_as_token_ids", Json(round % 2 == 0)}});
    Reply r = Post("/v1/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(GetJsonString(r.json, "object", "").value(), "text_completion");
    EXPECT_EQ(GetJsonInt(r.json, "policy_version", -1).value(), testing::kPolicyVersion);
    const Json& c = FindJson(r.json, "choices")->at(0);
    EXPECT_EQ(Ids(FindJson(c, "token_ids")), want.output_ids);
    EXPECT_EQ(Ids(FindJson(c, "prompt_token_ids")), prompt);
    EXPECT_EQ(GetJsonString(c, "finish_reason", "").value(), "length");
    EXPECT_EQ(GetJsonString(c, "text", "").value(),
              openai::SanitizeUtf8(Fixture().tokenizer->Decode(want.output_ids, /*skip_special=*/true)));
    const Json* lp = FindJson(c, "logprobs");
    ASSERT_TRUE(lp != nullptr && lp->is_object()) << r.body;
    const Json& tokens = *FindJson(*lp, "tokens");
    const Json& lps = *FindJson(*lp, "token_logprobs");
    ASSERT_EQ(tokens.size(), want.output_ids.size());
    ASSERT_EQ(lps.size(), want.output_ids.size());
    for (size_t i = 0; i < lps.size(); ++i) {
      EXPECT_NEAR(JsonNumber(lps[i]), want.logprobs[i], 1e-4);
      EXPECT_LE(JsonNumber(lps[i]), 0.0);
      if (round % 2 == 0) {
        EXPECT_EQ(tokens[i].get<std::string>(), "token_id:" + std::to_string(want.output_ids[i]));
      }
    }
    const Json* usage = FindJson(r.json, "usage");
    EXPECT_EQ(GetJsonInt(*usage, "prompt_tokens", -1).value(), static_cast<int64_t>(prompt.size()));
    EXPECT_EQ(GetJsonInt(*usage, "completion_tokens", -1).value(), static_cast<int64_t>(want.output_ids.size()));
  }
}

TEST(OpenAIServerTest, TextPromptsStopStringsAndSeveralChoices) {
  std::mt19937 rng = Rng();
  const std::string text = "def forward(self, x):\n    return torch.relu(x) @ w.T  # " + std::to_string(rng() % 1000);
  const std::vector<int32_t> prompt = Fixture().tokenizer->Encode(text);
  const GenerationResult want = testing::EngineGreedy(prompt, 12);
  // A stop string made of the greedy output's tokens 3..4: generation ends there, the text leaves it out.
  const std::string stop = Fixture().tokenizer->Decode({want.output_ids[3], want.output_ids[4]});
  Json body = Json::object({{"prompt", Json(text)},
                            {"max_tokens", Json(12)},
                            {"temperature", Json(0)},
                            {"n", Json(2)},
                            {"stop", Json(stop)},
                            {"return_token_ids", Json(true)}});
  Reply r = Post("/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(FindJson(r.json, "choices")->size(), 2u);
  for (const Json& c : *FindJson(r.json, "choices")) {
    EXPECT_EQ(Ids(FindJson(c, "prompt_token_ids")), prompt);
    const std::vector<int32_t> ids = Ids(FindJson(c, "token_ids"));
    ASSERT_GE(ids.size(), 2u);
    // Token-level stop: the first place the stop's ids appear in the greedy output.
    std::vector<int32_t> stop_ids = Fixture().tokenizer->Encode(stop);
    auto at = std::search(want.output_ids.begin(), want.output_ids.end(), stop_ids.begin(), stop_ids.end());
    if (at != want.output_ids.end()) {
      const std::vector<int32_t> expect(want.output_ids.begin(), at + static_cast<ptrdiff_t>(stop_ids.size()));
      EXPECT_EQ(ids, expect);
      EXPECT_EQ(GetJsonString(c, "finish_reason", "").value(), "stop");
      EXPECT_EQ(GetJsonString(c, "text", "").value(),
                openai::SanitizeUtf8(Fixture().tokenizer->Decode(
                    std::vector<int32_t>(want.output_ids.begin(), at), true)));
    } else {  // The stop string re-tokenizes differently: it never matches token-wise.
      EXPECT_EQ(ids, want.output_ids);
      EXPECT_EQ(GetJsonString(c, "finish_reason", "").value(), "length");
    }
  }
}

TEST(OpenAIServerTest, StreamedChunksAddUpToThePlainResponse) {
  std::mt19937 rng = Rng();
  for (const bool chat : {false, true}) {
    Json body = Json::object({{"max_tokens", Json(std::uniform_int_distribution<int>(3, 20)(rng))},
                              {"temperature", Json(0.9)},
                              {"seed", Json(1 + rng() % 100000)},
                              {"logprobs", chat ? Json(true) : Json(0)},
                              {"return_token_ids", Json(true)}});
    if (chat) {
      body["messages"] = Json::array({Json::object({{"role", Json("user")},
                                                      {"content", Json("Write a kernel " +
                                                                               std::to_string(rng() % 977))}})});
    } else {
      body["prompt"] = IdArray(testing::RandomIds(&rng, 3, 40));
    }
    const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
    Reply plain = Post(path, body);
    ASSERT_EQ(plain.status, 200) << plain.body;
    const Json& pc = FindJson(plain.json, "choices")->at(0);
    const std::vector<int32_t> want_ids = Ids(FindJson(pc, "token_ids"));
    const std::string want_text = chat ? GetJsonString(*FindJson(pc, "message"), "content", "").value()
                                       : GetJsonString(pc, "text", "").value();

    body["stream"] = Json(true);
    body["stream_options"] = Json::object({{"include_usage", Json(true)}});
    Reply streamed = Post(path, body);
    ASSERT_EQ(streamed.status, 200) << streamed.body;
    const std::vector<std::string> events = Events(streamed.body);
    ASSERT_GE(events.size(), 3u);
    EXPECT_EQ(events.back(), "[DONE]");
    std::string text, finish;
    std::vector<int32_t> ids;
    std::vector<double> lps;
    bool usage = false, role = false;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      Json e = *ParseJson(events[i]);
      EXPECT_EQ(GetJsonString(e, "object", "").value(), chat ? "chat.completion.chunk" : "text_completion");
      if (FindJson(e, "choices")->empty()) {
        usage = true;
        EXPECT_EQ(GetJsonInt(*FindJson(e, "usage"), "completion_tokens", -1).value(), static_cast<int64_t>(want_ids.size()));
        continue;
      }
      const Json& c = FindJson(e, "choices")->at(0);
      const std::vector<int32_t> step = Ids(FindJson(c, "token_ids"));
      ids.insert(ids.end(), step.begin(), step.end());
      if (chat) {
        role |= FindJson(*FindJson(c, "delta"), "role") != nullptr;
        text += GetJsonString(*FindJson(c, "delta"), "content", "").value();
        if (const Json* lp = FindJson(c, "logprobs"); lp != nullptr && lp->is_object()) {
          for (const Json& x : *FindJson(*lp, "content")) lps.push_back(JsonNumber(*FindJson(x, "logprob")));
        }
      } else {
        text += GetJsonString(c, "text", "").value();
        if (const Json* lp = FindJson(c, "logprobs"); lp != nullptr && lp->is_object()) {
          for (const Json& x : *FindJson(*lp, "token_logprobs")) lps.push_back(JsonNumber(x));
        }
      }
      if (const Json* f = FindJson(c, "finish_reason"); f != nullptr && f->is_string()) finish = f->get<std::string>();
    }
    EXPECT_EQ(ids, want_ids) << (chat ? "chat" : "completions");
    EXPECT_EQ(text, want_text);
    EXPECT_EQ(lps.size(), want_ids.size());
    EXPECT_EQ(finish, GetJsonString(pc, "finish_reason", "").value());
    EXPECT_TRUE(usage);
    EXPECT_EQ(role, chat);
  }
}

// A streamed POST read frame by frame as the bytes arrive, each payload
// stamped with the engine's completed-request count when it arrived.
struct Streamed {
  int status = 0;
  std::vector<std::string> events;
  std::vector<int64_t> completed_at;
};

Streamed PostStreaming(const std::string& path, const Json& body) {
  httplib::Client c("127.0.0.1", Fixture().port);
  c.set_read_timeout(300, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = DumpJson(body);
  req.set_header("Content-Type", "application/json");
  Streamed out;
  std::string buffer;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos; buffer.erase(0, end + 2)) {
      out.completed_at.push_back(Fixture().engine->GetInfo().requests_completed);
      const std::string frame = buffer.substr(0, end);
      EXPECT_TRUE(absl::StartsWith(frame, "data: ")) << frame;
      out.events.push_back(frame.substr(std::min<size_t>(6, frame.size())));
    }
    return true;
  };
  httplib::Result r = c.send(req);
  EXPECT_TRUE(r) << httplib::to_string(r.error());
  if (r) out.status = r->status;
  EXPECT_TRUE(buffer.empty()) << buffer;
  return out;
}

// Per choice index: the streamed token ids, text, log-probs and finish reason.
struct StreamedChoice {
  std::vector<int32_t> ids;
  std::string text, finish;
  std::vector<double> logprobs;
};

std::map<int64_t, StreamedChoice> Assemble(const std::vector<std::string>& events) {
  std::map<int64_t, StreamedChoice> out;
  for (const std::string& payload : events) {
    if (payload == "[DONE]") continue;
    Json e = *ParseJson(payload);
    for (const Json& c : *FindJson(e, "choices")) {
      StreamedChoice& sc = out[GetJsonInt(c, "index", -1).value()];
      const std::vector<int32_t> step = Ids(FindJson(c, "token_ids"));
      sc.ids.insert(sc.ids.end(), step.begin(), step.end());
      sc.text += GetJsonString(c, "text", "").value();
      if (const Json* lp = FindJson(c, "logprobs"); lp != nullptr && lp->is_object()) {
        for (const Json& x : *FindJson(*lp, "token_logprobs")) sc.logprobs.push_back(JsonNumber(x));
      }
      if (const Json* f = FindJson(c, "finish_reason"); f != nullptr && f->is_string()) sc.finish = f->get<std::string>();
    }
  }
  return out;
}

// Chunks leave as tokens are sampled: the first token's chunk reaches the
// client before the engine has completed the (long, greedy) request, and
// the chunks add up to the plain reply for the same request.
TEST(OpenAIServerTest, StreamSendsTokensWhileTheReplyIsStillBeingGenerated) {
  std::mt19937 rng = Rng();
  constexpr int kLong = 400;
  std::vector<int32_t> prompt;
  GenerationResult want;
  for (int attempt = 0; attempt < 8 && static_cast<int>(want.output_ids.size()) < kLong; ++attempt) {
    std::vector<int32_t> p = testing::RandomIds(&rng, 3, 30);
    GenerationResult g = testing::EngineGreedy(p, kLong);
    if (g.output_ids.size() > want.output_ids.size()) {
      prompt = std::move(p);
      want = std::move(g);
    }
  }
  ASSERT_GE(want.output_ids.size(), 200u) << "every greedy reply hit eos early";
  Json body = Json::object({{"prompt", IdArray(prompt)},
                            {"max_tokens", Json(kLong)},
                            {"temperature", Json(0)},
                            {"logprobs", Json(0)},
                            {"return_token_ids", Json(true)},
                            {"stream_options", Json::object({{"include_usage", Json(true)}})}});
  Reply plain = Post("/v1/completions", body);
  ASSERT_EQ(plain.status, 200) << plain.body;
  const Json& pc = FindJson(plain.json, "choices")->at(0);
  ASSERT_EQ(Ids(FindJson(pc, "token_ids")), want.output_ids);

  body["stream"] = Json(true);
  // This request is the engine's only one: completed moves by exactly one, at
  // its end. Whether the client reads the first chunk before that depends on
  // the scheduler of a loaded machine, so up to 3 tries; a server that sends
  // chunks only after generation (the old one) fails all 3, every time.
  Streamed s;
  bool incremental = false;
  for (int attempt = 0; attempt < 3 && !incremental; ++attempt) {
    const int64_t before = Fixture().engine->GetInfo().requests_completed;
    s = PostStreaming("/v1/completions", body);
    ASSERT_EQ(s.status, 200);
    ASSERT_GE(s.events.size(), want.output_ids.size() + 2);  // A chunk per token, usage, [DONE].
    EXPECT_EQ(s.events.back(), "[DONE]");
    size_t first_token = 0;
    while (first_token < s.events.size() && Ids(FindJson(FindJson(*ParseJson(s.events[first_token]), "choices")->at(0),
                                                             "token_ids")).empty()) {
      ++first_token;
    }
    ASSERT_LT(first_token, s.events.size());
    EXPECT_EQ(s.completed_at.back(), before + 1);
    incremental = s.completed_at[first_token] == before;
    const int64_t early = std::count(s.completed_at.begin(), s.completed_at.end(), before);
    std::printf("try %d: %lld of %zu chunks arrived before the %zu-token generation finished\n", attempt + 1,
                static_cast<long long>(early), s.events.size(), want.output_ids.size());
  }
  EXPECT_TRUE(incremental) << "the first token arrived after generation had finished, 3 times";

  std::map<int64_t, StreamedChoice> got = Assemble(s.events);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].ids, want.output_ids);
  EXPECT_EQ(got[0].text, GetJsonString(pc, "text", "").value());
  ASSERT_EQ(got[0].logprobs.size(), want.logprobs.size());
  for (size_t i = 0; i < want.logprobs.size(); ++i) EXPECT_NEAR(got[0].logprobs[i], want.logprobs[i], 1e-5);
  EXPECT_EQ(got[0].finish, GetJsonString(pc, "finish_reason", "").value());
  const Json usage = *ParseJson(s.events[s.events.size() - 2]);
  EXPECT_EQ(GetJsonInt(*FindJson(usage, "usage"), "completion_tokens", -1).value(),
            static_cast<int64_t>(want.output_ids.size()));
}

// A stop string spanning tokens (the chunks lag by its length) and several
// choices streamed together: each index adds up to its plain choice.
TEST(OpenAIServerTest, StreamedStopStringsAndSeveralChoicesEqualThePlainResponse) {
  std::mt19937 rng = Rng();
  // Three greedy tokens (not the first two) whose text encodes back to
  // them: a stop string the greedy choices end on.
  std::vector<int32_t> prompt;
  std::string stop;
  for (int attempt = 0; attempt < 20 && stop.empty(); ++attempt) {
    prompt = testing::RandomIds(&rng, 4, 30);
    const GenerationResult want = testing::EngineGreedy(prompt, 24);
    for (size_t at = 2; at + 3 <= want.output_ids.size() && stop.empty(); ++at) {
      const std::vector<int32_t> ids(want.output_ids.begin() + at, want.output_ids.begin() + at + 3);
      const std::string text = Fixture().tokenizer->Decode(ids);
      if (Fixture().tokenizer->Encode(text) == ids) stop = text;
    }
  }
  ASSERT_FALSE(stop.empty()) << "no 3-token stretch of 20 greedy replies round-trips";
  for (const double temperature : {0.0, 0.8}) {
    Json body = Json::object({{"prompt", IdArray(prompt)},
                              {"max_tokens", Json(24)},
                              {"temperature", Json(temperature)},
                              {"seed", Json(1 + rng() % 100000)},
                              {"n", Json(3)},
                              {"stop", Json(stop)},
                              {"logprobs", Json(0)},
                              {"return_token_ids", Json(true)}});
    Reply plain = Post("/v1/completions", body);
    ASSERT_EQ(plain.status, 200) << plain.body;
    body["stream"] = Json(true);
    Streamed s = PostStreaming("/v1/completions", body);
    ASSERT_EQ(s.status, 200);
    EXPECT_EQ(s.events.back(), "[DONE]");
    std::map<int64_t, StreamedChoice> got = Assemble(s.events);
    ASSERT_EQ(got.size(), 3u);
    for (const Json& c : *FindJson(plain.json, "choices")) {
      const StreamedChoice& sc = got[GetJsonInt(c, "index", -1).value()];
      EXPECT_EQ(sc.ids, Ids(FindJson(c, "token_ids"))) << "temperature " << temperature;
      EXPECT_EQ(sc.text, GetJsonString(c, "text", "").value()) << "temperature " << temperature;
      EXPECT_EQ(sc.finish, GetJsonString(c, "finish_reason", "").value());
      EXPECT_EQ(sc.logprobs.size(), sc.ids.size());
      if (temperature == 0) {
        EXPECT_EQ(sc.finish, "stop") << "the greedy choices end on the stop string";
      }
    }
  }
}

TEST(OpenAIServerTest, ChatRendersMessagesWithChatFormatAndStopsAtImEnd) {
  std::mt19937 rng = Rng();
  const std::string user = "Make model.py faster, task " + std::to_string(rng() % 10000);
  Json messages = Json::array(
      {Json::object({{"role", Json("system")}, {"content", Json("You write CUDA kernels.")}}),
       Json::object({{"role", Json("user")},
                     {"content", Json::array({Json::object({{"type", Json("text")},
                                                            {"text", Json(user)}})})}}),
       Json::object({{"role", Json("assistant")},
                     {"content", Json("Reading it.")},
                     {"tool_calls", Json::array({Json::object(
                                        {{"id", Json("call_1")},
                                         {"type", Json("function")},
                                         {"function", Json::object({{"name", Json("Read")},
                                                                    {"arguments", Json(
                                                                                      R"({"path": "model.py"})")}})}})})}}),
       Json::object({{"role", Json("tool")}, {"content", Json("class Model: ...")}})});
  Json body = Json::object({{"messages", messages},
                            {"tools", agent::ToolSchemas()},
                            {"max_tokens", Json(30)},
                            {"temperature", Json(0)},
                            {"logprobs", Json(true)},
                            {"return_token_ids", Json(true)}});
  Reply r = Post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;

  auto format = agent::ChatFormat::Create(Fixture().tokenizer.get(), agent::ToolSchemas());
  ASSERT_TRUE(format.ok());
  std::vector<agent::ChatTurn> turns(4);
  turns[0] = {agent::ChatRole::kSystem, "You write CUDA kernels.", {}, std::nullopt};
  turns[1] = {agent::ChatRole::kUser, user, {}, std::nullopt};
  turns[2] = {agent::ChatRole::kAssistant, "Reading it.", {{"Read", *ParseJson(R"({"path": "model.py"})")}}, std::nullopt};
  turns[3] = {agent::ChatRole::kTool, "class Model: ...", {}, std::nullopt};
  const std::vector<int32_t> prompt = format->Render(turns, true)->ids;
  EXPECT_EQ(Ids(FindJson(r.json, "prompt_token_ids")), prompt);
  const GenerationResult want = testing::EngineGreedy(prompt, 30, {{format->im_end_id()}});
  const Json& c = FindJson(r.json, "choices")->at(0);
  EXPECT_EQ(Ids(FindJson(c, "token_ids")), want.output_ids);
  EXPECT_EQ(GetJsonString(c, "finish_reason", "").value(), want.finish_reason == "stop_sequence" ? "stop" : "length");
  EXPECT_EQ(GetJsonString(*FindJson(c, "message"), "content", "").value(),
            openai::SanitizeUtf8(Fixture().tokenizer->Decode(want.output_ids, true)));
  EXPECT_EQ(FindJson(*FindJson(c, "logprobs"), "content")->size(), want.output_ids.size());
  EXPECT_EQ(GetJsonString(r.json, "object", "").value(), "chat.completion");
}

TEST(OpenAIServerTest, BadRequestsGetOpenAIErrorsWithTheRightStatus) {
  std::mt19937 rng = Rng();
  const Json prompt = IdArray(testing::RandomIds(&rng, 3, 10));
  auto with = [&](const char* key, Json value) {
    Json b = Json::object({{"prompt", prompt}, {"max_tokens", Json(4)}});
    b[key] = std::move(value);
    return b;
  };
  ExpectError(Call("POST", "/v1/completions", "{\"prompt\": [1, 2"), 400, "invalid_request_error", "");
  ExpectError(Post("/v1/completions", Json::object({{"max_tokens", Json(3)}})), 400, "invalid_request_error",
              "prompt");
  ExpectError(Post("/v1/completions", with("logprobs", Json(3))), 400, "invalid_request_error", "logprobs");
  ExpectError(Post("/v1/completions", with("temperature", Json(2.5))), 400, "invalid_request_error",
              "temperature");
  ExpectError(Post("/v1/completions", with("max_tokens", Json(0))), 400, "invalid_request_error", "max_tokens");
  ExpectError(Post("/v1/completions", with("n", Json("two"))), 400, "invalid_request_error", "n");
  Reply model = Post("/v1/completions", with("model", Json("gpt-4o")));
  ExpectError(model, 404, "not_found_error", "model");
  EXPECT_NE(GetJsonString(*FindJson(model.json, "error"), "message", "").value().find("gpt-4o"), std::string::npos);
  // An id past the model's vocabulary: the engine refuses it, reported as a bad prompt.
  ExpectError(Post("/v1/completions", with("prompt", IdArray({3, Fixture().model_vocab + 7}))), 400,
              "invalid_request_error", "prompt");
  ExpectError(Post("/v1/completions", with("prompt", IdArray(std::vector<int32_t>(testing::kMaxSeqLen, 9)))), 400,
              "invalid_request_error", "prompt");
  ExpectError(Post("/v1/chat/completions", Json::object({{"messages", Json::array()}})), 400,
              "invalid_request_error", "messages");
  ExpectError(Post("/v1/chat/completions",
                   Json::object({{"messages", Json::array({Json::object({{"role", Json("user")},
                                                                         {"content", Json("hi")}})})},
                                 {"top_logprobs", Json(2)}})),
              400, "invalid_request_error", "top_logprobs");
  ExpectError(Post("/v1/chat/completions",
                   Json::object({{"messages", Json::array({Json::object({{"role", Json("wizard")},
                                                                         {"content", Json("hi")}})})}})),
              400, "invalid_request_error", "messages[0].role");
  ExpectError(Call("GET", "/v1/completions"), 405, "invalid_request_error", "");
  ExpectError(Call("GET", "/v2/engines"), 404, "not_found_error", "");
}

TEST(OpenAIServerTest, ConcurrentRequestsAllComplete) {
  std::mt19937 rng = Rng();
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(testing::RandomIds(&rng, 3, 30));
  std::vector<Reply> replies(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] {
      replies[i] = Post("/v1/completions", Json::object({{"prompt", IdArray(prompts[i])},
                                                         {"max_tokens", Json(8)},
                                                         {"temperature", Json(0)},
                                                         {"n", Json(2)},
                                                         {"return_token_ids", Json(true)}}));
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(replies[i].status, 200) << replies[i].body;
    const Json& choices = *FindJson(replies[i].json, "choices");
    ASSERT_EQ(choices.size(), 2u);
    // Greedy: both choices equal the engine's own answer (batching does not change it).
    const GenerationResult want = testing::EngineGreedy(prompts[i], 8);
    for (const Json& c : choices) EXPECT_EQ(Ids(FindJson(c, "token_ids")), want.output_ids);
  }
}

TEST(OpenAIServerProtocolTest, Utf8Helpers) {
  EXPECT_EQ(openai::SanitizeUtf8("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(openai::SanitizeUtf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  // One U+FFFD per maximal invalid subpart, as Python's errors="replace".
  EXPECT_EQ(openai::SanitizeUtf8("\xE2\x82"), "\xEF\xBF\xBD");
  EXPECT_EQ(openai::SanitizeUtf8("\xE2\x82x\xF0\x9F\x98"), "\xEF\xBF\xBDx\xEF\xBF\xBD");
  EXPECT_EQ(openai::SanitizeUtf8("\xC3\xC3\xA9"), "\xEF\xBF\xBD\xC3\xA9");
  EXPECT_EQ(openai::CompleteUtf8Prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(openai::CompleteUtf8Prefix("ab\xE2\x82\xAC"), 5u);
  EXPECT_EQ(openai::CompleteUtf8Prefix("a\xFF"), 2u);
}

}  // namespace
}  // namespace kernelrl::learner
