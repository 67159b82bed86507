#include "agent/policy/policy_factory.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/chat/tools.h"
#include "agent/policy/choice_policy.h"
#include "agent/policy/grpc_policy.h"
#include "agent/policy/openai_policy.h"
#include "agent/policy/scripted_policy.h"

namespace kernelrl::agent {

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
  // The task family's choice vocabulary (docs/LEARNING.md): the model at `address`, or random; "_cpu" renders CPU kernels.
  if (absl::StartsWith(config.kind(), "choice")) {
    const std::string k = config.kind();
    const bool random = absl::StartsWith(k, "choice_random");
    if (k != "choice" && k != "choice_cpu" && k != "choice_random" && k != "choice_random_cpu") {
      return absl::InvalidArgumentError(absl::StrCat("policy.kind \"", k, "\": choice, choice_cpu, choice_random or choice_random_cpu"));
    }
    if (!random && config.address().empty()) return absl::InvalidArgumentError("policy.address is empty");
    return std::unique_ptr<PolicyClient>(new ChoicePolicy(
        random ? nullptr : std::make_unique<GrpcPolicy>(config), tokenizer, im_end_id,
        absl::EndsWith(k, "_cpu") ? "cpu" : "", config.scripted_policy_version()));
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
      absl::StrCat("policy.kind \"", config.kind(), "\" is not one of grpc, openai_completions, openai_chat, scripted, choice*"));
}

}  // namespace kernelrl::agent
