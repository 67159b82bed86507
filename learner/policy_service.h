// kernelrl.v1.Policy over gRPC: a thin adapter that converts messages and
// calls PolicyEngine (learner/policy/engine.h), where batching, sampling,
// version stamps and weight swaps live.
#ifndef KERNELRL_LEARNER_POLICY_SERVICE_H_
#define KERNELRL_LEARNER_POLICY_SERVICE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "learner/policy/engine.h"
#include "proto/learner_config.pb.h"
#include "proto/policy.grpc.pb.h"

namespace kernelrl::learner {

class PolicyService final : public v1::Policy::Service {
 public:
  explicit PolicyService(PolicyEngine* engine) : engine_(engine) {}

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        v1::GenerateResponse* response) override;
  grpc::Status GetWeightVersion(grpc::ServerContext* context, const v1::GetWeightVersionRequest* request,
                                v1::WeightVersion* response) override;

 private:
  PolicyEngine* engine_;
};

// Loads the model named by the config and starts an engine.
// gpu_lease_path: LearnerConfig.gpu_lease_path (checked here: a lease that
// cannot be taken is an error at start, not a silent race at every step);
// an engine on the CPU (policy.device "cpu") takes no lease, and decodes
// without CUDA graphs.
absl::StatusOr<std::unique_ptr<PolicyEngine>> MakePolicyEngine(const v1::PolicyServerConfig& config,
                                                               const std::string& gpu_lease_path = "");

}  // namespace kernelrl::learner

#endif  // KERNELRL_LEARNER_POLICY_SERVICE_H_
