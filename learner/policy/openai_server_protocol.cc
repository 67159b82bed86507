#include "learner/policy/openai_server_protocol.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "agent/chat/chat_format.h"

namespace kernelrl::learner::openai {
namespace {

constexpr int kMaxChoices = 64;

// The engine's reasons in OpenAI's two words.
std::string FinishReason(const std::string& engine_reason) {
  return engine_reason == "max_new_tokens" || engine_reason == "context_length" ? "length" : "stop";
}

// -inf is not JSON; vLLM writes -9999 for it too.
Json Logprob(float lp) { return Json(std::isfinite(lp) ? lp : -9999.0); }

Json IdArray(const std::vector<int32_t>& ids) {
  Json a = Json::array();
  for (int32_t id : ids) a.push_back(Json(id));
  return a;
}

absl::StatusOr<std::vector<int32_t>> IdsOf(const Json& array, const std::string& param) {
  std::vector<int32_t> ids;
  for (const Json& v : array) {
    absl::StatusOr<int64_t> id = JsonInt(v);
    if (!id.ok() || *id < 0 || *id > INT32_MAX) return BadParam(param, "token ids must be non-negative integers");
    ids.push_back(static_cast<int32_t>(*id));
  }
  return ids;
}

// The fields both endpoints share: sampling, n, stream, the vLLM extensions.
absl::Status ParseCommon(const Json& body, const agent::Tokenizer& tokenizer, ApiRequest* req) {
  auto number = [&](const char* key, double def, double lo, double hi, double* out) -> absl::Status {
    absl::StatusOr<double> v = GetJsonDouble(body, key, def);
    if (!v.ok()) return BadParam(key, absl::StrCat("'", key, "' must be a number"));
    if (!(*v >= lo && *v <= hi)) return BadParam(key, absl::StrCat("'", key, "' must be in [", lo, ", ", hi, "]"));
    *out = *v;
    return absl::OkStatus();
  };
  auto flag = [&](const char* key, bool def, bool* out) -> absl::Status {
    absl::StatusOr<bool> v = GetJsonBool(body, key, def);
    if (!v.ok()) return BadParam(key, absl::StrCat("'", key, "' must be a boolean"));
    *out = *v;
    return absl::OkStatus();
  };
  double temperature, top_p;
  if (absl::Status s = number("temperature", 1.0, 0.0, 2.0, &temperature); !s.ok()) return s;
  if (absl::Status s = number("top_p", 1.0, 1e-9, 1.0, &top_p); !s.ok()) return s;
  req->sampling.temperature = static_cast<float>(temperature);
  req->sampling.top_p = static_cast<float>(top_p);
  absl::StatusOr<int64_t> n = GetJsonInt(body, "n", 1);
  if (!n.ok() || *n < 1 || *n > kMaxChoices) return BadParam("n", absl::StrCat("'n' must be an integer in [1, ", kMaxChoices, "]"));
  req->n = static_cast<int>(*n);
  absl::StatusOr<int64_t> seed = GetJsonInt(body, "seed", 0);
  if (!seed.ok()) return BadParam("seed", "'seed' must be an integer");
  req->sampling.seed = static_cast<uint64_t>(*seed);
  for (const char* zero_only : {"presence_penalty", "frequency_penalty"}) {
    double v;
    if (absl::Status s = number(zero_only, 0.0, 0.0, 0.0, &v); !s.ok()) {
      return BadParam(zero_only, absl::StrCat("'", zero_only, "' is not supported (only 0)"));
    }
  }
  if (const Json* bias = FindJson(body, "logit_bias"); bias != nullptr && !bias->is_null() &&
                                                   !(bias->is_object() && bias->empty())) {
    return BadParam("logit_bias", "'logit_bias' is not supported");
  }
  if (absl::Status s = flag("stream", false, &req->stream); !s.ok()) return s;
  if (const Json* so = FindJson(body, "stream_options"); so != nullptr && so->is_object()) {
    absl::StatusOr<bool> usage = GetJsonBool(*so, "include_usage", false);
    if (!usage.ok()) return BadParam("stream_options", "'stream_options.include_usage' must be a boolean");
    req->include_usage = *usage;
  }
  if (absl::Status s = flag("return_token_ids", false, &req->return_token_ids); !s.ok()) return s;
  if (absl::Status s = flag("return_tokens_as_token_ids", false, &req->tokens_as_ids); !s.ok()) return s;
  if (absl::Status s = flag("skip_special_tokens", true, &req->skip_special); !s.ok()) return s;
  // stop: token-level; a string stops generation when the model emits exactly its tokens.
  if (const Json* stop = FindJson(body, "stop"); stop != nullptr && !stop->is_null()) {
    std::vector<std::string> texts;
    if (stop->is_string()) {
      texts.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const Json& s : *stop) {
        if (!s.is_string()) return BadParam("stop", "'stop' must be a string or a list of strings");
        texts.push_back(s.get<std::string>());
      }
    } else {
      return BadParam("stop", "'stop' must be a string or a list of strings");
    }
    for (const std::string& t : texts) {
      if (t.empty()) return BadParam("stop", "'stop' strings must not be empty");
      req->stop_strings.push_back(tokenizer.Encode(t));
      req->sampling.stop_sequences.push_back(req->stop_strings.back());
    }
  }
  if (const Json* ids = FindJson(body, "stop_token_ids"); ids != nullptr && !ids->is_null()) {
    if (!ids->is_array()) return BadParam("stop_token_ids", "'stop_token_ids' must be a list of token ids");
    absl::StatusOr<std::vector<int32_t>> v = IdsOf(*ids, "stop_token_ids");
    if (!v.ok()) return v.status();
    for (int32_t id : *v) req->sampling.stop_sequences.push_back({id});
  }
  return absl::OkStatus();
}

absl::Status ParseMaxTokens(const Json& body, const char* key, int64_t def, ApiRequest* req) {
  absl::StatusOr<int64_t> v = GetJsonInt(body, key, def);
  if (!v.ok() || *v < 0 || *v > INT32_MAX || (FindJson(body, key) != nullptr && !FindJson(body, key)->is_null() && *v < 1)) {
    return BadParam(key, absl::StrCat("'", key, "' must be a positive integer"));
  }
  req->sampling.max_new_tokens = static_cast<int32_t>(*v);
  return absl::OkStatus();
}

absl::Status CheckPrompt(const std::vector<int32_t>& prompt, int64_t max_seq_len, const char* param) {
  if (prompt.empty()) return BadParam(param, "the prompt is empty");
  if (max_seq_len > 0 && static_cast<int64_t>(prompt.size()) >= max_seq_len) {
    return BadParam(param, absl::StrCat("the prompt has ", prompt.size(), " tokens; this model's context is ",
                                        max_seq_len, " tokens"));
  }
  return absl::OkStatus();
}

// A message's text: a string, null, or a list of {"type": "text", "text": ...} parts.
absl::StatusOr<std::string> MessageText(const Json& message, size_t index) {
  const Json* c = FindJson(message, "content");
  const std::string param = absl::StrCat("messages[", index, "].content");
  if (c == nullptr || c->is_null()) return std::string();
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) return BadParam(param, "content must be a string or a list of text parts");
  std::string text;
  for (const Json& part : *c) {
    absl::StatusOr<std::string> type = GetJsonString(part, "type", "");
    absl::StatusOr<std::string> t = GetJsonString(part, "text", "");
    if (!type.ok() || *type != "text" || !t.ok()) return BadParam(param, "only text content parts are supported");
    text += *t;
  }
  return text;
}

absl::StatusOr<agent::ChatTurn> ParseMessage(const Json& m, size_t i) {
  const std::string param = absl::StrCat("messages[", i, "]");
  if (!m.is_object()) return BadParam(param, "each message must be an object");
  absl::StatusOr<std::string> role = GetJsonString(m, "role", "");
  if (!role.ok()) return BadParam(param + ".role", "role must be a string");
  absl::StatusOr<std::string> text = MessageText(m, i);
  if (!text.ok()) return text.status();
  agent::ChatTurn turn;
  turn.content = *text;
  if (*role == "system" || *role == "developer") {
    turn.role = agent::ChatRole::kSystem;
  } else if (*role == "user") {
    turn.role = agent::ChatRole::kUser;
  } else if (*role == "tool") {
    turn.role = agent::ChatRole::kTool;
  } else if (*role == "assistant") {
    turn.role = agent::ChatRole::kAssistant;
    const Json* calls = FindJson(m, "tool_calls");
    if (calls != nullptr && !calls->is_null()) {
      if (!calls->is_array()) return BadParam(param + ".tool_calls", "tool_calls must be a list");
      for (size_t k = 0; k < calls->size(); ++k) {
        const Json* fn = FindJson((*calls)[k], "function");
        const std::string cp = absl::StrCat(param, ".tool_calls[", k, "]");
        if (fn == nullptr || !fn->is_object()) return BadParam(cp, "a tool call needs a function");
        absl::StatusOr<std::string> name = GetJsonString(*fn, "name", "");
        absl::StatusOr<std::string> args = GetJsonString(*fn, "arguments", "{}");
        if (!name.ok() || name->empty() || !args.ok()) return BadParam(cp, "function.name and function.arguments (a JSON string)");
        absl::StatusOr<Json> parsed = ParseJson(*args);
        if (!parsed.ok() || !parsed->is_object()) return BadParam(cp, "function.arguments is not a JSON object");
        turn.tool_calls.push_back({*name, *std::move(parsed)});
      }
    }
  } else {
    return BadParam(param + ".role", absl::StrCat("unsupported role '", *role, "'"));
  }
  return turn;
}

// Per-token pieces of one choice's text, for logprobs and streaming deltas.
struct TokenPieces {
  std::vector<std::string> raw;      // Decoded bytes per token (specials as skip_special says).
  std::vector<std::string> display;  // Logprob token strings.
};

TokenPieces Pieces(const ReplyContext& ctx, const ApiRequest& req, const std::vector<int32_t>& ids) {
  TokenPieces p;
  for (int32_t id : ids) {
    p.raw.push_back(ctx.tokenizer->Decode({id}, req.skip_special));
    p.display.push_back(req.tokens_as_ids ? absl::StrCat("token_id:", id)
                                          : SanitizeUtf8(ctx.tokenizer->Decode({id}, false)));
  }
  return p;
}

// The output ids whose text is shown: without a stop string that ended it
// (OpenAI leaves stop strings out of the text; token_ids keep everything).
size_t ShownTokens(const ApiRequest& req, const GenerationResult& r) {
  if (r.finish_reason != "stop_sequence") return r.output_ids.size();
  for (const std::vector<int32_t>& stop : req.stop_strings) {
    if (stop.size() <= r.output_ids.size() &&
        std::equal(stop.begin(), stop.end(), r.output_ids.end() - static_cast<ptrdiff_t>(stop.size()))) {
      return r.output_ids.size() - stop.size();
    }
  }
  return r.output_ids.size();
}

std::string ChoiceText(const ReplyContext& ctx, const ApiRequest& req, const GenerationResult& r) {
  const std::vector<int32_t> shown(r.output_ids.begin(), r.output_ids.begin() + ShownTokens(req, r));
  return SanitizeUtf8(ctx.tokenizer->Decode(shown, req.skip_special));
}

Json Usage(const ApiRequest& req, const std::vector<Choice>& choices) {
  int64_t prompt = 0, completion = 0;
  for (const auto& p : req.prompts) prompt += static_cast<int64_t>(p.size());
  for (const Choice& c : choices) completion += static_cast<int64_t>(c.result.output_ids.size());
  return Json::object({{"prompt_tokens", Json(prompt)},
                       {"completion_tokens", Json(completion)},
                       {"total_tokens", Json(prompt + completion)}});
}

int64_t Version(const std::vector<Choice>& choices) {
  return choices.empty() ? 0 : choices.front().result.policy_version;
}

Json Envelope(const ReplyContext& ctx, const std::string& object, int64_t version) {
  return Json::object({{"id", Json(ctx.id)},
                       {"object", Json(object)},
                       {"created", Json(ctx.created)},
                       {"model", Json(ctx.model)},
                       {"system_fingerprint", Json(absl::StrCat("kernelrl-policy-v", version))},
                       {"policy_version", Json(version)}});
}

// Completions logprobs for tokens [begin, end) of a choice.
Json CompletionLogprobs(const TokenPieces& p, const GenerationResult& r, size_t begin, size_t end, size_t offset) {
  Json tokens = Json::array(), lps = Json::array(), offsets = Json::array();
  for (size_t i = begin; i < end; ++i) {
    tokens.push_back(Json(p.display[i]));
    lps.push_back(Logprob(r.logprobs[i]));
    offsets.push_back(Json(static_cast<int64_t>(offset)));
    offset += p.raw[i].size();
  }
  return Json::object({{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", Json()},
                       {"text_offset", offsets}});
}

Json ChatLogprobs(const TokenPieces& p, const GenerationResult& r, size_t begin, size_t end) {
  Json content = Json::array();
  for (size_t i = begin; i < end; ++i) {
    Json bytes = Json::array();
    for (unsigned char c : p.raw[i]) bytes.push_back(Json(c));
    content.push_back(Json::object({{"token", Json(p.display[i])},
                               {"logprob", Logprob(r.logprobs[i])},
                               {"bytes", bytes},
                               {"top_logprobs", Json::array()}}));
  }
  return Json::object({{"content", content}});
}

Json StopReason(const GenerationResult& r) {
  return r.finish_reason == "stop_sequence" || r.finish_reason == "eos" ? Json(r.output_ids.back()) : Json();
}

}  // namespace

absl::Status BadParam(const std::string& param, const std::string& message) {
  absl::Status s = absl::InvalidArgumentError(message);
  s.SetPayload(kParamPayload, absl::Cord(param));
  return s;
}

absl::Status CheckModel(const Json& body, const std::string& served_name) {
  const Json* m = FindJson(body, "model");
  if (m == nullptr || m->is_null()) return absl::OkStatus();
  if (!m->is_string() || m->get<std::string>() != served_name) {
    absl::Status s = absl::NotFoundError(absl::StrCat("The model `", m->is_string() ? m->get<std::string>() : DumpJson(*m),
                                                      "` does not exist. This server serves `", served_name, "`."));
    s.SetPayload(kParamPayload, absl::Cord("model"));
    return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<ApiRequest> ParseCompletionRequest(const Json& body, const agent::Tokenizer& tokenizer,
                                                  int64_t max_seq_len) {
  if (!body.is_object()) return BadParam("", "the request body must be a JSON object");
  ApiRequest req;
  req.endpoint = Endpoint::kCompletions;
  if (absl::Status s = ParseCommon(body, tokenizer, &req); !s.ok()) return s;
  if (absl::Status s = ParseMaxTokens(body, "max_tokens", 16, &req); !s.ok()) return s;
  absl::StatusOr<int64_t> logprobs = GetJsonInt(body, "logprobs", -1);
  if (!logprobs.ok() || *logprobs < -1 || *logprobs > 20) return BadParam("logprobs", "'logprobs' must be an integer in [0, 20]");
  if (*logprobs > 0) {
    return BadParam("logprobs", "this server returns only the sampled token's log-prob: use logprobs=0");
  }
  req.logprobs = *logprobs == 0;
  absl::StatusOr<bool> echo = GetJsonBool(body, "echo", false);
  if (!echo.ok() || *echo) return BadParam("echo", "'echo' is not supported");
  if (const Json* s = FindJson(body, "suffix"); s != nullptr && !s->is_null()) return BadParam("suffix", "'suffix' is not supported");
  absl::StatusOr<int64_t> best_of = GetJsonInt(body, "best_of", 1);
  if (!best_of.ok() || *best_of != 1) return BadParam("best_of", "'best_of' is not supported (only 1)");

  const Json* prompt = FindJson(body, "prompt");
  if (prompt == nullptr || prompt->is_null()) return BadParam("prompt", "'prompt' is required");
  if (prompt->is_string()) {
    req.prompts.push_back(tokenizer.Encode(prompt->get<std::string>()));
  } else if (prompt->is_array() && !prompt->empty()) {
    const Json& first = prompt->front();
    if (first.is_number()) {
      absl::StatusOr<std::vector<int32_t>> ids = IdsOf(*prompt, "prompt");
      if (!ids.ok()) return ids.status();
      req.prompts.push_back(*std::move(ids));
    } else {
      for (const Json& p : *prompt) {
        if (p.is_string()) {
          req.prompts.push_back(tokenizer.Encode(p.get<std::string>()));
        } else if (p.is_array()) {
          absl::StatusOr<std::vector<int32_t>> ids = IdsOf(p, "prompt");
          if (!ids.ok()) return ids.status();
          req.prompts.push_back(*std::move(ids));
        } else {
          return BadParam("prompt", "'prompt' must be a string, a list of token ids, or a list of either");
        }
      }
    }
  } else {
    return BadParam("prompt", "'prompt' must be a string, a list of token ids, or a list of either");
  }
  if (req.prompts.size() * static_cast<size_t>(req.n) > kMaxChoices) {
    return BadParam("prompt", absl::StrCat("at most ", kMaxChoices, " prompts x n per request"));
  }
  for (const auto& p : req.prompts) {
    if (absl::Status s = CheckPrompt(p, max_seq_len, "prompt"); !s.ok()) return s;
  }
  return req;
}

absl::StatusOr<ApiRequest> ParseChatRequest(const Json& body, const agent::Tokenizer& tokenizer,
                                            int64_t max_seq_len) {
  if (!body.is_object()) return BadParam("", "the request body must be a JSON object");
  ApiRequest req;
  req.endpoint = Endpoint::kChat;
  if (absl::Status s = ParseCommon(body, tokenizer, &req); !s.ok()) return s;
  const char* max_key = FindJson(body, "max_completion_tokens") != nullptr ? "max_completion_tokens" : "max_tokens";
  if (absl::Status s = ParseMaxTokens(body, max_key, 0, &req); !s.ok()) return s;
  absl::StatusOr<bool> logprobs = GetJsonBool(body, "logprobs", false);
  if (!logprobs.ok()) return BadParam("logprobs", "'logprobs' must be a boolean");
  req.logprobs = *logprobs;
  absl::StatusOr<int64_t> top = GetJsonInt(body, "top_logprobs", 0);
  if (!top.ok() || *top < 0 || *top > 20) return BadParam("top_logprobs", "'top_logprobs' must be an integer in [0, 20]");
  if (*top > 0) return BadParam("top_logprobs", "this server returns only the sampled token's log-prob: use top_logprobs=0");

  const Json* messages = FindJson(body, "messages");
  if (messages == nullptr || !messages->is_array() || messages->empty()) {
    return BadParam("messages", "'messages' must be a non-empty list");
  }
  std::vector<agent::ChatTurn> turns;
  for (size_t i = 0; i < messages->size(); ++i) {
    absl::StatusOr<agent::ChatTurn> t = ParseMessage((*messages)[i], i);
    if (!t.ok()) return t.status();
    turns.push_back(*std::move(t));
  }
  Json tools = Json::array();
  if (const Json* t = FindJson(body, "tools"); t != nullptr && !t->is_null()) {
    if (!t->is_array()) return BadParam("tools", "'tools' must be a list");
    tools = *t;
  }
  absl::StatusOr<agent::ChatFormat> format = agent::ChatFormat::Create(&tokenizer, tools);
  if (!format.ok()) return BadParam("messages", absl::StrCat("cannot render a chat for this model: ", format.status().message()));
  absl::StatusOr<agent::RenderedChat> rendered = format->Render(turns, /*add_generation_prompt=*/true);
  if (!rendered.ok()) return BadParam("messages", std::string(rendered.status().message()));
  if (absl::Status s = CheckPrompt(rendered->ids, max_seq_len, "messages"); !s.ok()) return s;
  req.prompts.push_back(std::move(rendered->ids));
  req.sampling.stop_sequences.push_back({format->im_end_id()});
  return req;
}

Json CompletionResponse(const ReplyContext& ctx, const ApiRequest& req, const std::vector<Choice>& choices) {
  const bool chat = req.endpoint == Endpoint::kChat;
  Json out = Envelope(ctx, chat ? "chat.completion" : "text_completion", Version(choices));
  Json list = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const GenerationResult& r = choices[i].result;
    const TokenPieces p = Pieces(ctx, req, r.output_ids);
    Json c = Json::object({{"index", Json(static_cast<int64_t>(i))}});
    if (chat) {
      c["message"] = Json::object({{"role", Json("assistant")},
                                     {"content", Json(ChoiceText(ctx, req, r))},
                                     {"tool_calls", Json::array()}});
      c["logprobs"] = req.logprobs ? ChatLogprobs(p, r, 0, r.output_ids.size()) : Json();
    } else {
      c["text"] = Json(ChoiceText(ctx, req, r));
      c["logprobs"] = req.logprobs ? CompletionLogprobs(p, r, 0, r.output_ids.size(), 0) : Json();
    }
    c["finish_reason"] = Json(FinishReason(r.finish_reason));
    c["stop_reason"] = StopReason(r);
    if (req.return_token_ids) {
      c["token_ids"] = IdArray(r.output_ids);
      if (!chat) c["prompt_token_ids"] = IdArray(req.prompts[choices[i].prompt_index]);
    }
    list.push_back(std::move(c));
  }
  out["choices"] = std::move(list);
  out["usage"] = Usage(req, choices);
  if (chat && req.return_token_ids) out["prompt_token_ids"] = IdArray(req.prompts[0]);
  return out;
}

ChoiceStream::ChoiceStream(const ReplyContext& ctx, const ApiRequest& req, size_t index)
    : ctx_(ctx), req_(req), index_(index) {
  for (const std::vector<int32_t>& stop : req.stop_strings) holdback_ = std::max(holdback_, stop.size());
}

std::string ChoiceStream::Chunk(Json delta_or_text, Json logprobs, Json finish, Json token_ids) const {
  const bool chat = req_.endpoint == Endpoint::kChat;
  Json c = Json::object({{"index", Json(static_cast<int64_t>(index_))}});
  c[chat ? "delta" : "text"] = std::move(delta_or_text);
  c["logprobs"] = std::move(logprobs);
  c["finish_reason"] = std::move(finish);
  if (req_.return_token_ids) c["token_ids"] = std::move(token_ids);
  Json e = Envelope(ctx_, chat ? "chat.completion.chunk" : "text_completion", seen_.policy_version);
  e["choices"] = Json::array({std::move(c)});
  return DumpJson(e);
}

void ChoiceStream::Start(int64_t policy_version, std::vector<std::string>* events) {
  if (started_) return;
  started_ = true;
  seen_.policy_version = policy_version;
  if (req_.endpoint != Endpoint::kChat) return;
  Json first = Json::object({{"index", Json(static_cast<int64_t>(index_))},
                             {"delta", Json::object({{"role", Json("assistant")},
                                                     {"content", Json("")}})},
                             {"logprobs", Json()},
                             {"finish_reason", Json()}});
  if (req_.return_token_ids) first["token_ids"] = Json::array();
  Json e = Envelope(ctx_, "chat.completion.chunk", policy_version);
  e["choices"] = Json::array({std::move(first)});
  if (req_.return_token_ids) e["prompt_token_ids"] = IdArray(req_.prompts[0]);
  events->push_back(DumpJson(e));
}

// Token t's chunk. Text is held back while it ends inside a UTF-8 character,
// and a stop string's tokens add no text.
void ChoiceStream::Send(size_t t, bool shown, bool last, std::vector<std::string>* events) {
  const bool chat = req_.endpoint == Endpoint::kChat;
  const int32_t id = seen_.output_ids[t];
  const std::string raw = ctx_.tokenizer->Decode({id}, req_.skip_special);
  if (shown) pending_ += raw;
  std::string delta;
  if (last) {
    delta = SanitizeUtf8(pending_);
    pending_.clear();
  } else {
    const size_t n = CompleteUtf8Prefix(pending_);
    delta = SanitizeUtf8(absl::string_view(pending_).substr(0, n));
    pending_.erase(0, n);
  }
  Json text = chat ? Json::object({{"content", Json(delta)}}) : Json(delta);
  Json lp = Json();
  if (req_.logprobs) {
    TokenPieces p;
    p.raw.push_back(raw);
    p.display.push_back(req_.tokens_as_ids ? absl::StrCat("token_id:", id)
                                           : SanitizeUtf8(ctx_.tokenizer->Decode({id}, false)));
    GenerationResult one;
    one.logprobs.push_back(seen_.logprobs[t]);
    lp = chat ? ChatLogprobs(p, one, 0, 1) : CompletionLogprobs(p, one, 0, 1, offset_);
  }
  offset_ += raw.size();
  Json finish = last && !chat ? Json(FinishReason(seen_.finish_reason)) : Json();
  events->push_back(Chunk(std::move(text), std::move(lp), std::move(finish), IdArray({id})));
}

std::vector<std::string> ChoiceStream::Token(int32_t id, float logprob, int64_t policy_version) {
  std::vector<std::string> events;
  Start(policy_version, &events);
  seen_.output_ids.push_back(id);
  seen_.logprobs.push_back(logprob);
  // Token t is neither the last nor inside a trailing stop string once
  // holdback_ (>= 1) tokens follow it.
  while (sent_ + holdback_ < seen_.output_ids.size()) Send(sent_++, /*shown=*/true, /*last=*/false, &events);
  return events;
}

std::vector<std::string> ChoiceStream::Finish(const GenerationResult& result) {
  std::vector<std::string> events;
  Start(result.policy_version, &events);
  const int64_t version = seen_.policy_version;
  seen_ = result;  // The tokens seen so far are its prefix.
  seen_.policy_version = version;
  const size_t shown = ShownTokens(req_, result);
  const size_t n = result.output_ids.size();
  while (sent_ < n) {
    const size_t t = sent_++;
    Send(t, t < shown, t + 1 == n, &events);
  }
  if (req_.endpoint == Endpoint::kChat || n == 0) {
    Json empty = req_.endpoint == Endpoint::kChat ? Json::object() : Json("");
    events.push_back(Chunk(std::move(empty), Json(), Json(FinishReason(result.finish_reason)),
                           Json::array()));
  }
  return events;
}

std::string UsageChunk(const ReplyContext& ctx, const ApiRequest& req, const std::vector<Choice>& choices) {
  Json e = Envelope(ctx, req.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion",
                    Version(choices));
  e["choices"] = Json::array();
  e["usage"] = Usage(req, choices);
  return DumpJson(e);
}

std::vector<std::string> CompletionChunks(const ReplyContext& ctx, const ApiRequest& req,
                                          const std::vector<Choice>& choices) {
  const int64_t version = Version(choices);
  std::vector<std::string> events;
  for (size_t i = 0; i < choices.size(); ++i) {
    const GenerationResult& r = choices[i].result;
    ChoiceStream stream(ctx, req, i);
    for (size_t t = 0; t < r.output_ids.size(); ++t) {
      for (std::string& e : stream.Token(r.output_ids[t], r.logprobs[t], version)) events.push_back(std::move(e));
    }
    GenerationResult stamped = r;
    stamped.policy_version = version;
    for (std::string& e : stream.Finish(stamped)) events.push_back(std::move(e));
  }
  if (req.include_usage) events.push_back(UsageChunk(ctx, req, choices));
  events.push_back("[DONE]");
  return events;
}

int HttpStatusFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

Json ErrorBody(const absl::Status& status) {
  const int http = HttpStatusFor(status);
  const char* type = http == 400   ? "invalid_request_error"
                     : http == 401 ? "authentication_error"
                     : http == 403 ? "permission_error"
                     : http == 404 ? "not_found_error"
                     : http == 429 ? "rate_limit_error"
                     : http >= 500 && http != 501 ? "server_error"
                                                  : "invalid_request_error";
  absl::optional<absl::Cord> param = status.GetPayload(kParamPayload);
  Json code = Json();
  if (http == 404 && param.has_value() && std::string(*param) == "model") code = Json("model_not_found");
  return Json::object(
      {{"error", Json::object({{"message", Json(SanitizeUtf8(status.message()))},
                               {"type", Json(type)},
                               {"param", param.has_value() && !param->empty() ? Json(std::string(*param))
                                                                               : Json()},
                               {"code", code}})}});
}

namespace {
// The UTF-8 sequence at s[i]: its length when valid; else -(length of the
// maximal valid prefix, at least 1), which becomes one U+FFFD (Unicode's
// recommended practice, what Python's errors="replace" does).
// `truncated` says the sequence was cut by the end of s.
int Utf8Len(absl::string_view s, size_t i, bool* truncated) {
  *truncated = false;
  const unsigned char c = static_cast<unsigned char>(s[i]);
  int len;
  unsigned char lo = 0x80, hi = 0xBF;  // Range of the second byte.
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k < len; ++k) {
    if (i + k >= s.size()) {
      *truncated = true;
      return -k;
    }
    const unsigned char b = static_cast<unsigned char>(s[i + k]);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return -k;
  }
  return len;
}
}  // namespace

std::string SanitizeUtf8(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool truncated;
  for (size_t i = 0; i < s.size();) {
    const int len = Utf8Len(s, i, &truncated);
    if (len > 0) {
      out.append(s.data() + i, static_cast<size_t>(len));
      i += static_cast<size_t>(len);
    } else {
      out.append("\xEF\xBF\xBD");
      i += static_cast<size_t>(-len);
    }
  }
  return out;
}

size_t CompleteUtf8Prefix(absl::string_view s) {
  size_t i = 0;
  bool truncated;
  while (i < s.size()) {
    const int len = Utf8Len(s, i, &truncated);
    if (truncated) return i;
    i += static_cast<size_t>(len > 0 ? len : -len);
  }
  return i;
}

}  // namespace kernelrl::learner::openai
