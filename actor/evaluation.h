// The seam between a rollout and the sandbox service: one evaluation of a
// workspace. Implementations never fail: infrastructure trouble comes back as
// an INFRA_ERROR verdict (never as the candidate's failure).
#ifndef KERNELRL_ACTOR_EVALUATION_H_
#define KERNELRL_ACTOR_EVALUATION_H_

#include "proto/sandbox.pb.h"
#include "proto/verdict.pb.h"

namespace kernelrl::actor {

class EvaluationClient {
 public:
  virtual ~EvaluationClient() = default;
  // Thread-safe.
  virtual v1::Verdict Evaluate(const v1::EvaluateRequest& request) = 0;
};

}  // namespace kernelrl::actor

#endif  // KERNELRL_ACTOR_EVALUATION_H_
