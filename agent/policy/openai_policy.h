// PolicyClient over an OpenAI-compatible HTTP endpoint (vLLM, SGLang, the
// learner's built-in server, a hosted API), through cpp-httplib.
//
// kind "openai_completions": POST {address}/v1/completions with the prompt
// as token ids — the exact ids the trajectory holds — and the sampled ids
// read back from the response: vLLM's choice `token_ids` (return_token_ids)
// or the "token_id:N" logprob tokens (return_tokens_as_token_ids), with
// `token_logprobs` as the per-token log-probs. Token-in/token-out holds by
// construction; a server that changes the prompt (choice prompt_token_ids
// differ) or returns no ids is an error.
//
// kind "openai_chat": POST {address}/v1/chat/completions with the history as
// messages (raw assistant text, tool results as role "tool", the tool
// schemas as `tools`); the server renders the prompt with its own chat
// template. The trajectory stays token-exact only if the server returns the
// sampled ids and its prompt_token_ids equal the actor's prompt; otherwise
// it is an error, unless allow_retokenize (evaluation) re-tokenizes the text.
//
// Both ask for logprobs, stop at the request's stop ids (stop_token_ids;
// "stop" strings with openai_standard_fields_only), and send seed and
// X-Request-Id. Errors: transport failures and HTTP 5xx are Unavailable
// (retried max_retries times with backoff), 4xx map to the matching absl
// code; the message holds the URL, the HTTP status and the server's
// error.message.
//
// The version stamp (policy.server): ours puts "policy_version" in every
// response; SGLang puts the weight_version that served the request in the
// response's metadata; vLLM reports only the current one (GET /weight_info),
// asked before and after the request, the older of the two stamped (a
// request that straddles an update is counted as the older weights', so the
// learner's staleness bound errs on the safe side). Other servers:
// static_policy_version. Every response's SamplingInfo is the model's at
// the request's temperature and top-p; vLLM must be serving processed
// log-probs for that to hold at temperature != 1 (vllm_processed_logprobs).
#ifndef KERNELRL_AGENT_POLICY_OPENAI_POLICY_H_
#define KERNELRL_AGENT_POLICY_OPENAI_POLICY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "agent/policy/policy.h"
#include "common/json.h"

namespace httplib {
class Client;
}  // namespace httplib

namespace kernelrl::agent {

class OpenAIPolicy final : public PolicyClient {
 public:
  // `tools` is announced in chat requests (ToolSchemas() for the
  // actor). The tokenizer must outlive the client.
  static absl::StatusOr<std::unique_ptr<OpenAIPolicy>> Create(const v1::PolicyBackendConfig& config,
                                                              const Tokenizer* tokenizer, int32_t im_end_id,
                                                              Json tools);
  ~OpenAIPolicy() override;

  absl::StatusOr<PolicyResponse> Generate(const PolicyRequest& request) override;

  // A weight_version as SGLang or vLLM report it (a string or a number),
  // set by the learner to the policy version; anything else is an error.
  static absl::StatusOr<int64_t> ParseWeightVersion(const Json* version);

  // The pieces, exposed for tests.
  Json CompletionBody(const PolicyRequest& request) const;
  absl::StatusOr<Json> ChatBody(const PolicyRequest& request) const;
  absl::StatusOr<PolicyResponse> ParseCompletion(const Json& response, const PolicyRequest& request) const;
  absl::StatusOr<PolicyResponse> ParseChat(const Json& response, const PolicyRequest& request) const;

 private:
  OpenAIPolicy(const v1::PolicyBackendConfig& config, const Tokenizer* tokenizer, int32_t im_end_id,
               Json tools, std::string scheme_host_port, std::string path_prefix, std::string api_key);
  // One POST with retries; the parsed JSON body of a 200.
  absl::StatusOr<Json> Post(const std::string& path, const Json& body, const std::string& request_id);
  // GET {scheme_host_port}{path} (no /v1 prefix: the servers' own endpoints).
  absl::StatusOr<Json> Get(const std::string& path);
  // vLLM: the weight version it serves now.
  absl::StatusOr<int64_t> ServedVersion();
  std::unique_ptr<httplib::Client> TakeClient();
  void ReturnClient(std::unique_ptr<httplib::Client> client);
  // Fills ids/logprobs from the response pieces both endpoints share.
  absl::StatusOr<PolicyResponse> Finish(const Json* token_ids, std::vector<std::string> logprob_tokens,
                                        const std::vector<float>* logprobs, const std::string& text,
                                        const Json& response, const Json& choice) const;

  const v1::PolicyBackendConfig config_;
  const Tokenizer* const tokenizer_;
  const int32_t im_end_id_;
  const Json tools_;
  const std::string scheme_host_port_, path_prefix_, api_key_;

  absl::Mutex mu_;
  std::vector<std::unique_ptr<httplib::Client>> idle_ ABSL_GUARDED_BY(mu_);  // Keep-alive connections.
};

}  // namespace kernelrl::agent

#endif  // KERNELRL_AGENT_POLICY_OPENAI_POLICY_H_
