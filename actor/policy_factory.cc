#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "actor/policy.h"
#include "actor/policy_openai.h"
#include "actor/scripted_policy.h"
#include "data/family/choice_policy.h"
#include "agent/chat/tools.h"
#include "grpcpp/grpcpp.h"
#include "proto/policy.grpc.pb.h"

namespace kernelrl::actor {
namespace {

// The learner's kernelrl.v1.Policy service: ids in, ids + log-probs out.
class GrpcPolicy final : public PolicyClient {
 public:
  explicit GrpcPolicy(const v1::PolicyBackendConfig& config)
      : config_(config),
        stub_(v1::Policy::NewStub(grpc::CreateChannel(config.address(), grpc::InsecureChannelCredentials()))) {}

  absl::StatusOr<PolicyResponse> Generate(const PolicyRequest& request) override {
    v1::GenerateRequest req;
    req.mutable_prompt_ids()->Add(request.prompt_ids.begin(), request.prompt_ids.end());
    v1::SamplingParams* s = req.mutable_sampling();
    s->set_temperature(request.temperature);
    s->set_top_p(request.top_p);
    s->set_max_new_tokens(request.max_new_tokens);
    s->set_seed(request.seed);
    for (int32_t id : request.stop_ids) s->add_stop_sequences()->add_ids(id);
    req.set_request_id(request.request_id);
    grpc::Status status;
    v1::GenerateResponse resp;
    for (int attempt = 0; attempt <= config_.max_retries(); ++attempt) {
      grpc::ClientContext ctx;
      if (config_.timeout_seconds() > 0) {
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(static_cast<int64_t>(config_.timeout_seconds() * 1000)));
      }
      ctx.set_wait_for_ready(true);
      status = stub_->Generate(&ctx, req, &resp);
      if (status.ok() || status.error_code() != grpc::StatusCode::UNAVAILABLE) break;
    }
    if (!status.ok()) {
      return absl::UnavailableError(absl::StrCat("Policy.Generate: ", status.error_code(), " ", status.error_message()));
    }
    PolicyResponse out;
    out.ids.assign(resp.output_ids().begin(), resp.output_ids().end());
    out.logprobs.assign(resp.logprobs().begin(), resp.logprobs().end());
    out.policy_version = resp.policy_version();
    out.finish_reason = resp.finish_reason();
    return out;
  }

 private:
  const v1::PolicyBackendConfig config_;
  std::unique_ptr<v1::Policy::Stub> stub_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PolicyClient>> MakePolicyClient(const v1::PolicyBackendConfig& config,
                                                                const agent::Tokenizer* tokenizer,
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
    return std::unique_ptr<PolicyClient>(new data::family::ChoicePolicy(
        random ? nullptr : std::make_unique<GrpcPolicy>(config), tokenizer, im_end_id,
        absl::EndsWith(k, "_cpu") ? "cpu" : "", config.scripted_policy_version()));
  }
  if (config.kind() == "grpc") {
    if (config.address().empty()) return absl::InvalidArgumentError("policy.address is empty");
    return std::unique_ptr<PolicyClient>(new GrpcPolicy(config));
  }
  if (config.kind() == "openai_completions" || config.kind() == "openai_chat") {
    if (tokenizer == nullptr) return absl::InvalidArgumentError("the OpenAI backends need the tokenizer");
    auto p = OpenAIPolicy::Create(config, tokenizer, im_end_id, agent::ToolSchemas());
    if (!p.ok()) return p.status();
    return std::unique_ptr<PolicyClient>(*std::move(p));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("policy.kind \"", config.kind(), "\" is not one of grpc, openai_completions, openai_chat, scripted"));
}

}  // namespace kernelrl::actor
