// GrpcPolicy: the learner's kernelrl.v1.Policy service (proto/policy.proto):
// ids in, ids + log-probs out. policy.address may name several engine
// replicas ("ipv4:h1:p1,h2:p2" or a DNS name with several records): gRPC's
// round_robin balances the calls over them (common/grpc_channel.h), and each
// reply carries the version of the replica that served it. UNAVAILABLE is retried up to
// config.max_retries times; each attempt waits for the channel to be ready
// until config.timeout_seconds. Thread-safe (the stub is).
#ifndef KERNELRL_AGENT_POLICY_GRPC_POLICY_H_
#define KERNELRL_AGENT_POLICY_GRPC_POLICY_H_

#include <memory>

#include "agent/policy/policy.h"
#include "proto/actor_config.pb.h"
#include "proto/policy.grpc.pb.h"

namespace kernelrl::agent {

class GrpcPolicy final : public PolicyClient {
 public:
  explicit GrpcPolicy(const v1::PolicyBackendConfig& config);

  absl::StatusOr<PolicyResponse> Generate(const PolicyRequest& request) override;

 private:
  const v1::PolicyBackendConfig config_;
  std::unique_ptr<v1::Policy::Stub> stub_;
};

}  // namespace kernelrl::agent

#endif  // KERNELRL_AGENT_POLICY_GRPC_POLICY_H_
