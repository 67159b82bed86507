#include "agent/policy/grpc_policy.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/grpc_channel.h"
#include "grpcpp/grpcpp.h"

namespace kernelrl::agent {

GrpcPolicy::GrpcPolicy(const v1::PolicyBackendConfig& config)
    : config_(config),
      stub_(v1::Policy::NewStub(RoundRobinChannel(config.address(), /*health_check=*/false))) {}

absl::StatusOr<PolicyResponse> GrpcPolicy::Generate(const PolicyRequest& request) {
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
  out.sampling = ModelSampling(request);  // The engine's log-probs are of softmax(logits / T).
  return out;
}

}  // namespace kernelrl::agent
