// LearnerClient: the actor's side of kernelrl.v1.Learner — leasing tasks and
// pushing finished trajectories.
//
// Push() sends a batch on one PushTrajectories stream and returns when every
// trajectory is acked (accepted or rejected). If the stream breaks, the
// trajectories not yet acked are sent again on a new stream (at most
// `attempts` streams); trajectory ids make a resend idempotent on the
// learner. The caller holds at most one batch (max_unacked) at a time, which
// is the backpressure on its rollout workers, and nothing else: a killed
// actor loses only the rollouts in flight and the batch not yet acked.
// Thread-safe (each call has its own stream).
#ifndef KERNELRL_ACTOR_LEARNER_CLIENT_H_
#define KERNELRL_ACTOR_LEARNER_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "proto/actor_config.pb.h"
#include "proto/learner.grpc.pb.h"

namespace kernelrl::actor {

class LearnerClient {
 public:
  LearnerClient(std::shared_ptr<grpc::Channel> channel, v1::LearnerClientConfig config, std::string actor_id);

  // Up to `max_tasks` leases (possibly none: the caller backs off).
  absl::StatusOr<std::vector<v1::TaskLease>> Lease(int max_tasks);

  // One ack per request, in the order of `batch`.
  absl::StatusOr<std::vector<v1::PushTrajectoriesAck>> Push(const std::vector<v1::PushTrajectoriesRequest>& batch,
                                                            int attempts = 3);

 private:
  std::unique_ptr<v1::Learner::Stub> stub_;
  const v1::LearnerClientConfig config_;
  const std::string actor_id_;
};

}  // namespace kernelrl::actor

#endif  // KERNELRL_ACTOR_LEARNER_CLIENT_H_
