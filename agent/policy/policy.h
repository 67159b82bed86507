// PolicyClient: one sampling call of the agent loop, whatever serves the
// model — the learner's Policy service (gRPC), an OpenAI-compatible HTTP
// endpoint (vLLM, SGLang, hosted, or the learner's own), or a scripted
// replay for CI and demonstrations. One file per backend beside this one;
// policy_factory.h picks one from a PolicyBackendConfig.
//
// Token-in/token-out: the request carries the exact prompt ids; the response
// the exact sampled ids, one log-prob per id and the weight version.
#ifndef KERNELRL_AGENT_POLICY_POLICY_H_
#define KERNELRL_AGENT_POLICY_POLICY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/chat/chat_format.h"
#include "agent/chat/tool_calls.h"
#include "agent/tokenizer/tokenizer.h"
#include "proto/actor_config.pb.h"
#include "proto/task.pb.h"
#include "proto/trajectory.pb.h"

namespace kernelrl::agent {

struct PolicyRequest {
  std::vector<int32_t> prompt_ids;
  int32_t max_new_tokens = 0;
  float temperature = 1.0f;
  float top_p = 1.0f;
  std::vector<int32_t> stop_ids;  // Each a one-token stop sequence (<|im_end|>).
  uint64_t seed = 0;
  std::string request_id;
  // For backends that cannot take ids (chat endpoints, the scripted replay).
  std::string task_id;
  int turn = 0;                                           // 0-based assistant turn.
  const std::vector<ChatTurn>* history = nullptr;  // What prompt_ids render.
};

struct PolicyResponse {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  int64_t policy_version = 0;
  std::string finish_reason;  // "stop", "length", ...
  // Who produced the ids and under which parameters the log-probs hold;
  // every backend fills it, the trajectory carries it to the learner.
  v1::SamplingInfo sampling;
};

// The SamplingInfo of ids sampled by the model itself under `request`'s
// parameters (log-probs of softmax(logits / T)).
inline v1::SamplingInfo ModelSampling(const PolicyRequest& request) {
  v1::SamplingInfo s;
  s.set_policy("model");
  s.set_temperature(request.temperature);
  s.set_top_p(request.top_p);
  return s;
}

class PolicyClient {
 public:
  virtual ~PolicyClient() = default;
  // Thread-safe.
  virtual absl::StatusOr<PolicyResponse> Generate(const PolicyRequest& request) = 0;
};

}  // namespace kernelrl::agent

#endif  // KERNELRL_AGENT_POLICY_POLICY_H_
