// MakePolicyClient: the PolicyClient backend a PolicyBackendConfig names.
#ifndef KERNELRL_AGENT_POLICY_POLICY_FACTORY_H_
#define KERNELRL_AGENT_POLICY_POLICY_FACTORY_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "agent/policy/engineer_policy.h"
#include "agent/policy/policy.h"
#include "agent/tokenizer/tokenizer.h"
#include "proto/actor_config.pb.h"

namespace kernelrl::agent {

// The backend named by config.kind ("grpc", "openai_completions",
// "openai_chat", "scripted", "engineer",
// "engineer_cpu"). The tokenizer must outlive it.
absl::StatusOr<std::unique_ptr<PolicyClient>> MakePolicyClient(const v1::PolicyBackendConfig& config,
                                                                const Tokenizer* tokenizer,
                                                                int32_t im_end_id);

// The scripted engineer's options: its defaults, with the fields `config` sets
// (the warm-up actors' and corpus_gen's one source), writing kernels for `device`.
EngineerPolicyOptions EngineerOptions(const v1::EngineerConfig& config, const std::string& device);

}  // namespace kernelrl::agent

#endif  // KERNELRL_AGENT_POLICY_POLICY_FACTORY_H_
