#include "agent/policy/openai_policy.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "httplib.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "agent/chat/tool_calls.h"
#include "common/file.h"

namespace kernelrl::agent {
namespace {

constexpr char kTokenIdPrefix[] = "token_id:";

Json IdArray(const std::vector<int32_t>& ids) {
  Json a = Json::array();
  for (int32_t id : ids) a.push_back(Json(id));
  return a;
}

absl::StatusOr<std::vector<int32_t>> ReadIds(const Json& array, const char* what) {
  std::vector<int32_t> ids;
  for (const Json& v : array) {
    absl::StatusOr<int64_t> id = JsonInt(v);
    if (!id.ok() || *id < 0 || *id > INT32_MAX) return absl::DataLossError(absl::StrCat("response ", what, " holds a non-id"));
    ids.push_back(static_cast<int32_t>(*id));
  }
  return ids;
}

// The absl code for an HTTP error status.
absl::StatusCode CodeForHttp(int status) {
  if (status >= 500 || status == 429 || status == 408) {
    return status == 429 ? absl::StatusCode::kResourceExhausted : absl::StatusCode::kUnavailable;
  }
  switch (status) {
    case 400:
    case 422:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    default:
      return absl::StatusCode::kUnknown;
  }
}

// The server's own words: OpenAI {"error": {"message", "code"}}, vLLM's
// older {"object": "error", "message"}, FastAPI's {"detail"}; else the body.
std::string ServerMessage(const std::string& body) {
  absl::StatusOr<Json> j = ParseJson(body);
  if (j.ok() && j->is_object()) {
    const Json* e = FindJson(*j, "error");
    const Json* holder = e != nullptr && e->is_object() ? e : &*j;
    if (const Json* m = FindJson(*holder, "message"); m != nullptr && m->is_string()) {
      const Json* code = FindJson(*holder, "code");
      return code != nullptr && code->is_string() ? absl::StrCat(m->get<std::string>(), " (", code->get<std::string>(), ")") : m->get<std::string>();
    }
    if (const Json* d = FindJson(*j, "detail"); d != nullptr) return d->is_string() ? d->get<std::string>() : DumpJson(*d);
  }
  return body.size() > 300 ? absl::StrCat(body.substr(0, 300), "...") : body;
}

bool Retryable(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kResourceExhausted;
}

const char* RoleName(agent::ChatRole role) {
  switch (role) {
    case agent::ChatRole::kSystem:
      return "system";
    case agent::ChatRole::kAssistant:
      return "assistant";
    case agent::ChatRole::kTool:
      return "tool";
    default:
      return "user";
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<OpenAIPolicy>> OpenAIPolicy::Create(const v1::PolicyBackendConfig& config,
                                                                   const Tokenizer* tokenizer,
                                                                   int32_t im_end_id, Json tools) {
  if (config.kind() != "openai_completions" && config.kind() != "openai_chat") {
    return absl::InvalidArgumentError(absl::StrCat("OpenAIPolicy: kind \"", config.kind(), "\""));
  }
  if (const std::string& s = config.server(); !s.empty() && s != "kernelrl" && s != "sglang" && s != "vllm") {
    return absl::InvalidArgumentError(absl::StrCat("policy.server \"", s, "\": \"\", kernelrl, sglang or vllm"));
  }
  const std::string& address = config.address();
  const size_t scheme_end = address.find("://");
  if (address.empty() || scheme_end == std::string::npos ||
      !(absl::StartsWith(address, "http://") || absl::StartsWith(address, "https://"))) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy.address \"", address, "\" is not a base URL (http://host:port[/v1])"));
  }
  const size_t path_start = address.find('/', scheme_end + 3);
  std::string host = address.substr(0, path_start);
  std::string prefix = path_start == std::string::npos ? "" : address.substr(path_start);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (!absl::EndsWith(prefix, "/v1")) prefix += "/v1";
  std::string key;
  if (!config.api_key_file().empty()) {
    absl::StatusOr<std::string> k = ReadFileToString(config.api_key_file());
    if (!k.ok()) return absl::InvalidArgumentError(absl::StrCat("policy.api_key_file: ", k.status().message()));
    key = std::string(absl::StripAsciiWhitespace(*k));
  }
  httplib::Client probe(host);
  if (!probe.is_valid()) return absl::InvalidArgumentError(absl::StrCat("policy.address \"", address, "\": unusable URL"));
  return std::unique_ptr<OpenAIPolicy>(
      new OpenAIPolicy(config, tokenizer, im_end_id, std::move(tools), std::move(host), std::move(prefix), std::move(key)));
}

OpenAIPolicy::OpenAIPolicy(const v1::PolicyBackendConfig& config, const Tokenizer* tokenizer,
                           int32_t im_end_id, Json tools, std::string scheme_host_port, std::string path_prefix,
                           std::string api_key)
    : config_(config),
      tokenizer_(tokenizer),
      im_end_id_(im_end_id),
      tools_(std::move(tools)),
      scheme_host_port_(std::move(scheme_host_port)),
      path_prefix_(std::move(path_prefix)),
      api_key_(std::move(api_key)) {}

OpenAIPolicy::~OpenAIPolicy() = default;

std::unique_ptr<httplib::Client> OpenAIPolicy::TakeClient() {
  {
    absl::MutexLock l(&mu_);
    if (!idle_.empty()) {
      std::unique_ptr<httplib::Client> c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  auto c = std::make_unique<httplib::Client>(scheme_host_port_);
  c->set_keep_alive(true);
  c->set_connection_timeout(10, 0);
  const double t = config_.timeout_seconds() > 0 ? config_.timeout_seconds() : 3600;
  const auto us = std::chrono::microseconds(static_cast<int64_t>(t * 1e6));
  c->set_read_timeout(us);
  c->set_write_timeout(us);
  return c;
}

void OpenAIPolicy::ReturnClient(std::unique_ptr<httplib::Client> client) {
  absl::MutexLock l(&mu_);
  idle_.push_back(std::move(client));
}

absl::StatusOr<Json> OpenAIPolicy::Post(const std::string& path, const Json& body, const std::string& request_id) {
  const std::string url = absl::StrCat(scheme_host_port_, path_prefix_, path);
  httplib::Headers headers;
  if (!api_key_.empty()) headers.emplace("Authorization", absl::StrCat("Bearer ", api_key_));
  if (!request_id.empty()) headers.emplace("X-Request-Id", request_id);
  const std::string payload = DumpJson(body);
  absl::Status last;
  for (int attempt = 0; attempt <= std::max(0, config_.max_retries()); ++attempt) {
    if (attempt > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(5000, 200 << std::min(attempt - 1, 5))));
    }
    std::unique_ptr<httplib::Client> client = TakeClient();
    httplib::Result res = client->Post(path_prefix_ + path, headers, payload, "application/json");
    if (!res) {  // Transport failure: the connection is not reused.
      last = absl::UnavailableError(absl::StrCat("POST ", url, ": ", httplib::to_string(res.error())));
      continue;
    }
    const int status = res->status;
    const std::string response = std::move(res->body);
    ReturnClient(std::move(client));
    if (status == 200) {
      absl::StatusOr<Json> j = ParseJson(response);
      if (!j.ok() || !j->is_object()) {
        return absl::DataLossError(absl::StrCat("POST ", url, ": HTTP 200 but the body is not a JSON object: ",
                                                response.substr(0, 200)));
      }
      return j;
    }
    last = absl::Status(CodeForHttp(status), absl::StrCat("POST ", url, ": HTTP ", status, ": ", ServerMessage(response)));
    if (!Retryable(last.code())) return last;
  }
  return last;
}

absl::StatusOr<Json> OpenAIPolicy::Get(const std::string& path) {
  const std::string url = absl::StrCat(scheme_host_port_, path);
  httplib::Headers headers;
  if (!api_key_.empty()) headers.emplace("Authorization", absl::StrCat("Bearer ", api_key_));
  std::unique_ptr<httplib::Client> client = TakeClient();
  httplib::Result res = client->Get(path, headers);
  if (!res) return absl::UnavailableError(absl::StrCat("GET ", url, ": ", httplib::to_string(res.error())));
  ReturnClient(std::move(client));
  if (res->status != 200) {
    return absl::Status(CodeForHttp(res->status), absl::StrCat("GET ", url, ": HTTP ", res->status, ": ",
                                                               ServerMessage(res->body)));
  }
  absl::StatusOr<Json> j = ParseJson(res->body);
  if (!j.ok() || !j->is_object()) return absl::DataLossError(absl::StrCat("GET ", url, ": not a JSON object"));
  return j;
}

absl::StatusOr<int64_t> OpenAIPolicy::ParseWeightVersion(const Json* version) {
  if (version == nullptr || version->is_null()) {
    return absl::FailedPreconditionError(
        "the server reports no weight_version: start it with one (SGLang --weight-version 0) and let the learner "
        "update it (policy.external in the learner's config)");
  }
  int64_t v = -1;
  if (version->is_string()) {
    if (!absl::SimpleAtoi(version->get<std::string>(), &v)) v = -1;
  } else if (absl::StatusOr<int64_t> i = JsonInt(*version); i.ok()) {
    v = *i;
  }
  if (v < 0) {
    return absl::FailedPreconditionError(absl::StrCat("weight_version ", DumpJson(*version),
                                                      " is not a policy version (a non-negative integer)"));
  }
  return v;
}

absl::StatusOr<int64_t> OpenAIPolicy::ServedVersion() {
  absl::StatusOr<Json> info = Get("/weight_info");
  if (!info.ok()) return info.status();
  return ParseWeightVersion(FindJson(*info, "weight_version"));
}

Json OpenAIPolicy::CompletionBody(const PolicyRequest& request) const {
  Json body = Json::object({{"prompt", IdArray(request.prompt_ids)}});
  if (!config_.model().empty()) body["model"] = Json(config_.model());
  if (request.max_new_tokens > 0) body["max_tokens"] = Json(request.max_new_tokens);
  body["temperature"] = Json(request.temperature);
  body["top_p"] = Json(request.top_p);
  body["n"] = Json(1);
  body["stream"] = Json(false);
  body["logprobs"] = Json(0);  // Only the sampled token's.
  if (request.seed != 0) body["seed"] = Json(static_cast<int64_t>(request.seed & INT64_MAX));
  if (config_.openai_standard_fields_only()) {
    Json stop = Json::array();
    for (int32_t id : request.stop_ids) stop.push_back(Json(tokenizer_->Decode({id})));
    if (!request.stop_ids.empty()) body["stop"] = std::move(stop);
    return body;
  }
  body["stop_token_ids"] = IdArray(request.stop_ids);
  body["return_token_ids"] = Json(true);
  body["return_tokens_as_token_ids"] = Json(true);
  body["skip_special_tokens"] = Json(false);
  body["include_stop_str_in_output"] = Json(true);
  return body;
}

absl::StatusOr<Json> OpenAIPolicy::ChatBody(const PolicyRequest& request) const {
  if (request.history == nullptr) return absl::InvalidArgumentError("openai_chat needs the chat history");
  Json messages = Json::array();
  for (const ChatTurn& t : *request.history) {
    std::string content = t.content;
    if (content.empty() && t.generated_ids.has_value()) {
      std::vector<int32_t> ids = *t.generated_ids;
      if (!ids.empty() && ids.back() == im_end_id_) ids.pop_back();
      content = tokenizer_->Decode(ids);
    }
    for (const ToolCallSpec& c : t.tool_calls) {
      absl::StrAppend(&content, content.empty() ? "" : "\n", agent::FormatToolCall(c.name, c.arguments));
    }
    messages.push_back(Json::object({{"role", Json(RoleName(t.role))}, {"content", Json(content)}}));
  }
  Json body = CompletionBody(request);
  Json out = Json::object({{"messages", std::move(messages)}});
  for (const auto& [key, value] : body.items()) {
    if (key == "prompt" || key == "logprobs") continue;
    out[key] = value;
  }
  if (!tools_.empty()) out["tools"] = tools_;
  out["logprobs"] = Json(true);
  out["top_logprobs"] = Json(0);
  return out;
}

absl::StatusOr<PolicyResponse> OpenAIPolicy::Finish(const Json* token_ids, std::vector<std::string> logprob_tokens,
                                                    const std::vector<float>* logprobs, const std::string& text,
                                                    const Json& response, const Json& choice) const {
  PolicyResponse out;
  out.finish_reason = GetJsonString(choice, "finish_reason", "").value_or("");
  if (config_.server() == "sglang") {
    const Json* metadata = FindJson(response, "metadata");
    absl::StatusOr<int64_t> v = ParseWeightVersion(metadata != nullptr ? FindJson(*metadata, "weight_version") : nullptr);
    if (!v.ok()) return v.status();
    out.policy_version = *v;
  } else {  // vLLM's is set by Generate.
    const Json* version = FindJson(response, "policy_version");
    absl::StatusOr<int64_t> v = version != nullptr ? JsonInt(*version) : absl::StatusOr<int64_t>(absl::NotFoundError(""));
    out.policy_version = v.ok() ? *v : config_.static_policy_version();
  }

  bool exact = false;
  if (token_ids != nullptr && token_ids->is_array()) {
    absl::StatusOr<std::vector<int32_t>> ids = ReadIds(*token_ids, "token_ids");
    if (!ids.ok()) return ids.status();
    out.ids = *std::move(ids);
    exact = true;
  } else if (!logprob_tokens.empty()) {
    exact = true;
    for (const std::string& t : logprob_tokens) {
      int32_t id;
      if (!absl::StartsWith(t, kTokenIdPrefix) || !absl::SimpleAtoi(t.substr(sizeof(kTokenIdPrefix) - 1), &id)) {
        exact = false;
        out.ids.clear();
        break;
      }
      out.ids.push_back(id);
    }
  }
  const bool retokenize_ok = config_.allow_retokenize() || config_.openai_standard_fields_only();
  if (exact && logprobs != nullptr && logprobs->size() == out.ids.size()) {
    out.logprobs = *logprobs;
    return out;
  }
  if (!retokenize_ok) {
    if (exact) {
      return absl::FailedPreconditionError(absl::StrCat("the server returned ", out.ids.size(), " token ids but ",
                                                        logprobs == nullptr ? 0 : logprobs->size(),
                                                        " log-probs; PPO needs one per sampled token"));
    }
    return absl::FailedPreconditionError(
        "the server returned no token ids, so the trajectory cannot hold what was sampled: use a server that "
        "honours return_token_ids or return_tokens_as_token_ids (vLLM >= 0.10.2, or `vllm serve "
        "--return-tokens-as-token-ids`), or set policy.allow_retokenize (evaluation only)");
  }
  // Not the server's sampled ids and log-probs: nothing the learner may weight by.
  out.sampling.set_policy("retokenized");
  if (!exact) {
    out.ids = tokenizer_->Encode(text);
    if (out.finish_reason == "stop") out.ids.push_back(im_end_id_);
  }
  out.logprobs.assign(out.ids.size(), 0.0f);
  if (logprobs != nullptr && logprobs->size() == out.ids.size()) out.logprobs = *logprobs;
  return out;
}

absl::StatusOr<PolicyResponse> OpenAIPolicy::ParseCompletion(const Json& response, const PolicyRequest& request) const {
  const Json* choices = FindJson(response, "choices");
  if (choices == nullptr || !choices->is_array() || choices->empty()) {
    return absl::DataLossError("completion response has no choices");
  }
  const Json& choice = choices->front();
  if (const Json* p = FindJson(choice, "prompt_token_ids"); p != nullptr && p->is_array()) {
    absl::StatusOr<std::vector<int32_t>> ids = ReadIds(*p, "prompt_token_ids");
    if (!ids.ok()) return ids.status();
    if (*ids != request.prompt_ids) {
      return absl::FailedPreconditionError(absl::StrCat("the server generated from a different prompt (",
                                                        ids->size(), " ids, ours ", request.prompt_ids.size(),
                                                        "): it must not add BOS or re-tokenize"));
    }
  }
  std::vector<std::string> tokens;
  std::vector<float> lps;
  bool have_lps = false;
  if (const Json* lp = FindJson(choice, "logprobs"); lp != nullptr && lp->is_object()) {
    const Json* t = FindJson(*lp, "tokens");
    const Json* l = FindJson(*lp, "token_logprobs");
    if (t != nullptr && t->is_array()) {
      for (const Json& s : *t) tokens.push_back(s.is_string() ? s.get<std::string>() : "");
    }
    if (l != nullptr && l->is_array()) {
      have_lps = true;
      for (const Json& x : *l) {
        if (!x.is_number()) return absl::DataLossError("token_logprobs holds a non-number");
        lps.push_back(static_cast<float>(JsonNumber(x)));
      }
    }
  }
  const std::string text = GetJsonString(choice, "text", "").value_or("");
  return Finish(FindJson(choice, "token_ids"), std::move(tokens), have_lps ? &lps : nullptr, text, response, choice);
}

absl::StatusOr<PolicyResponse> OpenAIPolicy::ParseChat(const Json& response, const PolicyRequest& request) const {
  const Json* choices = FindJson(response, "choices");
  if (choices == nullptr || !choices->is_array() || choices->empty()) {
    return absl::DataLossError("chat response has no choices");
  }
  const Json& choice = choices->front();
  const Json* prompt = FindJson(response, "prompt_token_ids");
  if (prompt == nullptr || !prompt->is_array()) prompt = FindJson(choice, "prompt_token_ids");
  if (prompt != nullptr && prompt->is_array()) {
    absl::StatusOr<std::vector<int32_t>> ids = ReadIds(*prompt, "prompt_token_ids");
    if (!ids.ok()) return ids.status();
    if (*ids != request.prompt_ids && !config_.allow_retokenize()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the server's chat template rendered a different prompt (", ids->size(), " ids, the trajectory's ",
          request.prompt_ids.size(), "): use openai_completions for training, or set policy.allow_retokenize"));
    }
  }
  const Json* message = FindJson(choice, "message");
  std::string text;
  if (message != nullptr && message->is_object()) {
    text = GetJsonString(*message, "content", "").value_or("");
    if (const Json* calls = FindJson(*message, "tool_calls"); calls != nullptr && calls->is_array()) {
      for (const Json& c : *calls) {  // Servers that parse calls out of the text (vLLM auto tool choice).
        const Json* fn = FindJson(c, "function");
        if (fn == nullptr) continue;
        absl::StatusOr<Json> args = ParseJson(GetJsonString(*fn, "arguments", "{}").value_or("{}"));
        absl::StrAppend(&text, text.empty() ? "" : "\n",
                        agent::FormatToolCall(GetJsonString(*fn, "name", "").value_or(""), args.ok() ? *args : Json::object()));
      }
    }
  }
  std::vector<std::string> tokens;
  std::vector<float> lps;
  bool have_lps = false;
  if (const Json* lp = FindJson(choice, "logprobs"); lp != nullptr && lp->is_object()) {
    if (const Json* content = FindJson(*lp, "content"); content != nullptr && content->is_array()) {
      have_lps = true;
      for (const Json& e : *content) {
        tokens.push_back(GetJsonString(e, "token", "").value_or(""));
        const Json* l = FindJson(e, "logprob");
        if (l == nullptr || !l->is_number()) return absl::DataLossError("logprobs.content holds an entry without logprob");
        lps.push_back(static_cast<float>(JsonNumber(*l)));
      }
    }
  }
  return Finish(FindJson(choice, "token_ids"), std::move(tokens), have_lps ? &lps : nullptr, text, response, choice);
}

absl::StatusOr<PolicyResponse> OpenAIPolicy::Generate(const PolicyRequest& request) {
  const bool vllm = config_.server() == "vllm";
  if (vllm && request.temperature > 0 && std::abs(request.temperature - 1.0f) > 1e-6f &&
      !config_.vllm_processed_logprobs()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "temperature ", request.temperature, " on vLLM: its default log-probs are raw (before temperature), so "
        "importance weights would be wrong; start it with --logprobs-mode processed_logprobs and set "
        "policy.vllm_processed_logprobs"));
  }
  int64_t before = 0;
  if (vllm) {
    absl::StatusOr<int64_t> v = ServedVersion();
    if (!v.ok()) return v.status();
    before = *v;
  }
  absl::StatusOr<PolicyResponse> out;
  if (config_.kind() == "openai_completions") {
    absl::StatusOr<Json> response = Post("/completions", CompletionBody(request), request.request_id);
    if (!response.ok()) return response.status();
    out = ParseCompletion(*response, request);
  } else {
    absl::StatusOr<Json> body = ChatBody(request);
    if (!body.ok()) return body.status();
    absl::StatusOr<Json> response = Post("/chat/completions", *body, request.request_id);
    if (!response.ok()) return response.status();
    out = ParseChat(*response, request);
  }
  if (!out.ok()) return out;
  if (vllm) {
    absl::StatusOr<int64_t> after = ServedVersion();
    if (!after.ok()) return after.status();
    out->policy_version = std::min(before, *after);
  }
  const std::string policy = out->sampling.policy();
  out->sampling = ModelSampling(request);
  if (!policy.empty()) out->sampling.set_policy(policy);
  return out;
}

}  // namespace kernelrl::agent
