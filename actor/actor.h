// Actor: the rollout workers of one actor process. Each of
// `concurrent_rollouts` threads leases one task from the learner, runs its
// rollout (RolloutRunner) and pushes the trajectory, waiting for the ack
// before leasing again: the push is the backpressure, and the only state is
// the rollout in flight (kill -9 loses that rollout, nothing acked).
// Metrics (common/metrics): rollouts by stop reason, rollout seconds, turns
// per rollout, policy and sandbox seconds, tool calls and errors by tool,
// final outcomes, pushes by result.
#ifndef KERNELRL_ACTOR_ACTOR_H_
#define KERNELRL_ACTOR_ACTOR_H_

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "actor/learner_client.h"
#include "actor/rollout.h"
#include "common/metrics.h"

namespace kernelrl::actor {

class Actor {
 public:
  // All pointers must outlive the actor.
  Actor(const RolloutRunner* runner, LearnerClient* learner, v1::ActorConfig config, MetricsRegistry* metrics);
  ~Actor();  // Stop()s.

  void Start();
  // No worker takes a new lease; the current rollouts go on. Returns at once.
  void StopLeasing();
  // Lets each worker finish (and push) its current rollout, then joins.
  void Stop();

 private:
  void Work(int index);

  const RolloutRunner* runner_;
  LearnerClient* learner_;
  const v1::ActorConfig config_;
  Family<Counter>& rollouts_;
  Family<Histogram>& rollout_seconds_;
  Family<Histogram>& turns_;
  Family<Histogram>& policy_seconds_;
  Family<Histogram>& sandbox_seconds_;
  Family<Counter>& tool_calls_;
  Family<Counter>& tool_errors_;
  Family<Counter>& outcomes_;
  Family<Counter>& pushes_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

}  // namespace kernelrl::actor

#endif  // KERNELRL_ACTOR_ACTOR_H_
