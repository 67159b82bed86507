// SandboxPool: an actor's evaluations spread over N sandbox workers (one per
// GPU) by gRPC client-side load balancing.
//
//  * One channel to `target` ("ipv4:a:p,b:p" or "dns:///name:port") with the
//    round_robin policy: consecutive calls go to consecutive ready workers.
//  * health_check: the channel watches each worker's grpc.health.v1 status;
//    a NOT_SERVING worker (draining, GPU probe failed) leaves the rotation
//    and gets no new work until it reports SERVING again.
//  * An evaluation that fails for infrastructure reasons (the RPC fails, or
//    the worker answers INFRA_ERROR) is retried `retries` times — round_robin
//    sends the retry to another worker — and then reported as an
//    INFRA_ERROR verdict naming the cause. A worker's failure is never the
//    candidate's: no other outcome is synthesized here.
// Thread-safe.
#ifndef KERNELRL_ACTOR_SANDBOX_POOL_H_
#define KERNELRL_ACTOR_SANDBOX_POOL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "actor/evaluation.h"
#include "grpcpp/grpcpp.h"
#include "proto/actor_config.pb.h"
#include "proto/sandbox.grpc.pb.h"

namespace kernelrl::actor {

class SandboxPool final : public EvaluationClient {
 public:
  static absl::StatusOr<std::unique_ptr<SandboxPool>> Create(const v1::SandboxPoolConfig& config);

  v1::Verdict Evaluate(const v1::EvaluateRequest& request) override;

  // Attempts made so far (first tries + retries), for tests and metrics.
  int64_t attempts() const { return attempts_.load(); }

 private:
  SandboxPool(v1::SandboxPoolConfig config, std::shared_ptr<grpc::Channel> channel);

  const v1::SandboxPoolConfig config_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Sandbox::Stub> stub_;
  std::atomic<int64_t> attempts_{0};
};

}  // namespace kernelrl::actor

#endif  // KERNELRL_ACTOR_SANDBOX_POOL_H_
