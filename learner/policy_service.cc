#include "learner/policy_service.h"

#include "absl/strings/str_cat.h"
#include "common/gpu_lease.h"
#include "common/grpc_status.h"

namespace kernelrl::learner {

grpc::Status PolicyService::Generate(grpc::ServerContext*, const v1::GenerateRequest* request,
                                     v1::GenerateResponse* response) {
  GenerationRequest r;
  r.prompt.assign(request->prompt_ids().begin(), request->prompt_ids().end());
  r.request_id = request->request_id();
  const v1::SamplingParams& sp = request->sampling();
  r.sampling.temperature = sp.temperature();
  r.sampling.top_p = sp.top_p();
  r.sampling.max_new_tokens = sp.max_new_tokens();
  r.sampling.seed = sp.seed();
  for (const v1::TokenSequence& stop : sp.stop_sequences()) {
    r.sampling.stop_sequences.emplace_back(stop.ids().begin(), stop.ids().end());
  }
  auto result = engine_->Generate(std::move(r));
  if (!result.ok()) return ToGrpcStatus(result.status());
  response->mutable_output_ids()->Add(result->output_ids.begin(), result->output_ids.end());
  response->mutable_logprobs()->Add(result->logprobs.begin(), result->logprobs.end());
  response->set_policy_version(result->policy_version);
  response->set_finish_reason(result->finish_reason);
  return grpc::Status::OK;
}

grpc::Status PolicyService::GetWeightVersion(grpc::ServerContext*, const v1::GetWeightVersionRequest*,
                                             v1::WeightVersion* response) {
  PolicyEngine::Info info = engine_->GetInfo();
  response->set_policy_version(info.policy_version);
  response->set_checkpoint_path(info.checkpoint_path);
  response->set_loaded_at(info.loaded_at);
  return grpc::Status::OK;
}

absl::StatusOr<std::unique_ptr<PolicyEngine>> MakePolicyEngine(const v1::PolicyServerConfig& config,
                                                               const std::string& gpu_lease_path) {
  if (config.model_path().empty()) return absl::InvalidArgumentError("policy.model_path is required");
  const std::string device = config.device().empty() ? "cuda" : config.device();
  // An engine on the CPU runs no GPU work, so it steps outside the lease: it samples while a
  // sandbox worker times on the GPU, instead of waiting for every profile to end.
  const bool on_gpu = device != "cpu";
  const std::string lease_path = on_gpu ? gpu_lease_path : "";
  if (absl::StatusOr<GpuLease::Hold> probe = GpuLease(lease_path).Shared(); !probe.ok()) return probe.status();
  EngineOptions eo;
  eo.gpu_lease_path = lease_path;
  if (config.max_batch() > 0) eo.max_batch = config.max_batch();
  if (config.max_seq_len() > 0) eo.max_seq_len = config.max_seq_len();
  if (config.max_prefill_tokens() > 0) eo.max_prefill_tokens = config.max_prefill_tokens();
  if (config.kv_block_size() > 0) eo.block_size = config.kv_block_size();
  if (config.kv_blocks() > 0) eo.kv_blocks = config.kv_blocks();
  eo.prefix_caching = !config.disable_prefix_caching();
  eo.cuda_graphs = config.cuda_graph_decode() && on_gpu;
  return PolicyEngine::Load(config.model_path(), device, config.dtype(), config.initial_policy_version(), std::move(eo));
}

}  // namespace kernelrl::learner
