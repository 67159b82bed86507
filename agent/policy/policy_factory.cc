#include "agent/policy/policy_factory.h"

#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/chat/tools.h"
#include "agent/policy/engineer_policy.h"
#include "agent/policy/grpc_policy.h"
#include "agent/policy/openai_policy.h"
#include "agent/policy/scripted_policy.h"

namespace kernelrl::agent {

EngineerPolicyOptions EngineerOptions(const v1::EngineerConfig& config, const std::string& device) {
  EngineerPolicyOptions o;
  o.device = device;
  if (config.has_fault_rate()) o.fault_rate = config.fault_rate();
  if (config.has_fp16_rate()) o.fp16_rate = config.fp16_rate();
  if (config.has_revisions()) o.revisions = config.revisions();
  o.read_lines = config.read_lines();
  o.stop_at_reward = config.stop_at_reward();
  o.rewrite_kernel = config.rewrite_kernel();
  o.shell_changes = config.shell_changes();
  return o;
}

absl::StatusOr<std::unique_ptr<PolicyClient>> MakePolicyClient(const v1::PolicyBackendConfig& config,
                                                                const Tokenizer* tokenizer,
                                                                int32_t im_end_id) {
  if (config.kind() == "scripted") {
    if (config.scripted_solutions_dir().empty()) {
      return absl::InvalidArgumentError("policy.scripted_solutions_dir is empty");
    }
    return std::unique_ptr<PolicyClient>(
        new ScriptedPolicy(config.scripted_solutions_dir(), config.scripted_policy_version(), tokenizer, im_end_id));
  }
  // The scripted kernel engineer of the task family (the recipe's warm-up data); "_cpu" writes CPU kernels.
  if (config.kind() == "engineer" || config.kind() == "engineer_cpu") {
    if (tokenizer == nullptr) return absl::InvalidArgumentError("the engineer policy needs the tokenizer");
    EngineerPolicyOptions o = EngineerOptions(config.engineer(), config.kind() == "engineer_cpu" ? "cpu" : "cuda");
    o.policy_version = config.scripted_policy_version();
    return std::unique_ptr<PolicyClient>(new EngineerPolicy(tokenizer, im_end_id, o, std::random_device{}()));
  }
  if (config.kind() == "grpc") {
    if (config.address().empty()) return absl::InvalidArgumentError("policy.address is empty");
    return std::unique_ptr<PolicyClient>(new GrpcPolicy(config));
  }
  if (config.kind() == "openai_completions" || config.kind() == "openai_chat") {
    if (tokenizer == nullptr) return absl::InvalidArgumentError("the OpenAI backends need the tokenizer");
    auto p = OpenAIPolicy::Create(config, tokenizer, im_end_id, ToolSchemas());
    if (!p.ok()) return p.status();
    return std::unique_ptr<PolicyClient>(*std::move(p));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("policy.kind \"", config.kind(), "\" is not one of grpc, openai_completions, openai_chat, scripted, engineer, engineer_cpu"));
}

}  // namespace kernelrl::agent
