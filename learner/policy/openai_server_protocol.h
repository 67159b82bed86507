// The OpenAI-compatible HTTP API's wire format, without engine or network:
// request bodies -> engine requests, engine results -> response bodies and
// SSE chunks. learner/policy/openai_server.h routes and serves it.
//
// Accepted (anything else in a body is ignored, as vLLM does):
//   /v1/completions       model, prompt (string | [ids] | [string] | [[ids]]),
//                         max_tokens (16), temperature (1), top_p (1), n (1),
//                         seed, stop (string | [string]), logprobs (0 only),
//                         stream, stream_options.include_usage
//   /v1/chat/completions  model, messages (system|developer|user|assistant|tool;
//                         content string or text parts; assistant tool_calls),
//                         tools, max_tokens | max_completion_tokens (context
//                         left), logprobs (bool), top_logprobs (0 only), and the
//                         sampling fields above
//   vLLM's extensions     stop_token_ids, return_token_ids (choice `token_ids`;
//                         `prompt_token_ids` on the completion choice, at the
//                         top level for chat), return_tokens_as_token_ids
//                         (logprob tokens read "token_id:N"),
//                         skip_special_tokens (true)
// Every response carries "policy_version" (the engine's weight version) and
// system_fingerprint "kernelrl-policy-v<version>".
// The engine returns only the sampled token's log-prob, so top log-probs
// (completions logprobs > 0, chat top_logprobs > 0) are refused with 400
// rather than made up. Chat prompts are rendered by agent::ChatFormat
// (ChatML + tools, docs/LEARNER.md), the reply is the decoded text.
#ifndef KERNELRL_LEARNER_POLICY_OPENAI_SERVER_PROTOCOL_H_
#define KERNELRL_LEARNER_POLICY_OPENAI_SERVER_PROTOCOL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/tokenizer/tokenizer.h"
#include "common/json.h"
#include "learner/policy/engine.h"

namespace kernelrl::learner::openai {

enum class Endpoint { kCompletions, kChat };

// One parsed request: what to generate and how to answer.
struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::vector<std::vector<int32_t>> prompts;  // Chat: exactly one.
  SamplingOptions sampling;
  // The `stop` strings' ids (also in sampling.stop_sequences): left out of
  // the text when they end a choice, as OpenAI does.
  std::vector<std::vector<int32_t>> stop_strings;
  int n = 1;  // Choices per prompt.
  bool stream = false;
  bool include_usage = false;      // stream_options.include_usage.
  bool logprobs = false;
  bool return_token_ids = false;
  bool tokens_as_ids = false;      // return_tokens_as_token_ids.
  bool skip_special = true;        // skip_special_tokens.
};

// One finished choice.
struct Choice {
  int prompt_index = 0;
  GenerationResult result;
};

// Errors carry the OpenAI `param` as a payload (kParamPayload), so the HTTP
// layer can fill {"error": {"param": ...}}.
inline constexpr char kParamPayload[] = "kernelrl.openai.param";
absl::Status BadParam(const std::string& param, const std::string& message);

// Parses a body. InvalidArgument (400) names the offending field; a wrong
// "model" is NotFound (404). `max_seq_len` bounds prompts.
absl::StatusOr<ApiRequest> ParseCompletionRequest(const Json& body, const agent::Tokenizer& tokenizer,
                                                  int64_t max_seq_len);
absl::StatusOr<ApiRequest> ParseChatRequest(const Json& body, const agent::Tokenizer& tokenizer,
                                            int64_t max_seq_len);
// "model" absent, or equal to the served name.
absl::Status CheckModel(const Json& body, const std::string& served_name);

// What the responses need besides the choices.
struct ReplyContext {
  std::string id;  // "cmpl-..." / "chatcmpl-...".
  int64_t created = 0;
  std::string model;
  const agent::Tokenizer* tokenizer = nullptr;
};

// Non-streaming response body.
Json CompletionResponse(const ReplyContext& ctx, const ApiRequest& req, const std::vector<Choice>& choices);
// SSE payloads in order, the final "[DONE]" included.
std::vector<std::string> CompletionChunks(const ReplyContext& ctx, const ApiRequest& req,
                                          const std::vector<Choice>& choices);

// One choice's SSE payloads while it is generated (CompletionChunks feeds
// one per choice too, so both paths send the same bytes). A token's chunk
// goes out once the tokens after it show it is neither the last one (whose
// chunk carries the completions finish_reason) nor inside a trailing stop
// string (left out of the text): the longest stop string's length, at least
// one token, of lag. Chat's role chunk comes first. ctx and req must outlive
// the stream; not thread-safe.
class ChoiceStream {
 public:
  ChoiceStream(const ReplyContext& ctx, const ApiRequest& req, size_t index);
  // The chunks that became final with this token (the engine's on_token).
  std::vector<std::string> Token(int32_t id, float logprob, int64_t policy_version);
  // The rest, the finish chunk included, once the engine returned `result`
  // (whose output the tokens passed to Token() begin).
  std::vector<std::string> Finish(const GenerationResult& result);

 private:
  void Start(int64_t policy_version, std::vector<std::string>* events);
  void Send(size_t t, bool shown, bool last, std::vector<std::string>* events);
  std::string Chunk(Json delta_or_text, Json logprobs, Json finish, Json token_ids) const;

  const ReplyContext& ctx_;
  const ApiRequest& req_;
  const size_t index_;
  size_t holdback_ = 1;
  bool started_ = false;
  GenerationResult seen_;   // Tokens so far; the version of the first.
  size_t sent_ = 0;         // Tokens whose chunk is out.
  std::string pending_;     // Text not yet sent (an incomplete UTF-8 character).
  size_t offset_ = 0;       // Completions text_offset of the next token.
};
// The stream_options.include_usage chunk (after every choice's last chunk).
std::string UsageChunk(const ReplyContext& ctx, const ApiRequest& req, const std::vector<Choice>& choices);

// OpenAI's error shape: {"error": {"message", "type", "param", "code"}}, and
// the HTTP status for an absl code.
int HttpStatusFor(const absl::Status& status);
Json ErrorBody(const absl::Status& status);

// Text helpers (exposed for tests): U+FFFD for invalid UTF-8; the length of
// the longest prefix that does not end inside a (possibly still incomplete)
// multi-byte character.
std::string SanitizeUtf8(absl::string_view s);
size_t CompleteUtf8Prefix(absl::string_view s);

}  // namespace kernelrl::learner::openai

#endif  // KERNELRL_LEARNER_POLICY_OPENAI_SERVER_PROTOCOL_H_
