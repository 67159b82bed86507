// What the trainer needs from data-parallel training: collectives over all
// ranks of one run. learner/dist/data_parallel.h implements them with c10d
// (ProcessGroupNCCL, one process per GPU); a Trainer without Collectives is
// one rank.
//
// Contract: every rank calls the same collectives in the same order with
// tensors of the same shapes and dtypes; the calls block until all ranks have
// joined. A rank that leaves the sequence (an early error return) makes the
// others wait until the backend's timeout, so callers check their inputs
// before the first collective of a step.
#ifndef KERNELRL_LEARNER_RL_COLLECTIVES_H_
#define KERNELRL_LEARNER_RL_COLLECTIVES_H_

#include <ATen/ATen.h>

#include <vector>

#include "absl/status/status.h"

namespace kernelrl::learner::rl {

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In place: every tensor becomes the element-wise sum (max) over ranks.
  virtual absl::Status AllReduceSum(std::vector<at::Tensor>& tensors) = 0;
  virtual absl::Status AllReduceMax(std::vector<at::Tensor>& tensors) = 0;
  // In place: every tensor becomes root's.
  virtual absl::Status Broadcast(std::vector<at::Tensor>& tensors, int root) = 0;
};

}  // namespace kernelrl::learner::rl

#endif  // KERNELRL_LEARNER_RL_COLLECTIVES_H_
