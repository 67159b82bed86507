// Gradients the tests compare across forward variants (checkpointing,
// offload, adapters): the next-token log-likelihood of `ids` [B,T].
#ifndef KERNELRL_LEARNER_MODEL_TEST_UTIL_H_
#define KERNELRL_LEARNER_MODEL_TEST_UTIL_H_

#include <ATen/ATen.h>

#include <vector>

#include "learner/model.h"

namespace kernelrl::learner::testing {

// Zeroes the parameters' gradients, backpropagates -mean log p(ids[:,t+1] | ids[:,:t+1])
// and returns a copy of each parameter's gradient.
inline std::vector<at::Tensor> NextTokenGradients(Transformer& m, const at::Tensor& ids) {
  for (auto& p : m.parameters()) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
  const int64_t n = ids.size(1) - 1;
  at::Tensor h = m.Hidden(ids.narrow(1, 0, n));
  (-m.TokenLogprobs(h, ids.narrow(1, 1, n)).mean()).backward();
  std::vector<at::Tensor> g;
  for (auto& p : m.parameters()) g.push_back(p.grad().clone());
  return g;
}

}  // namespace kernelrl::learner::testing

#endif  // KERNELRL_LEARNER_MODEL_TEST_UTIL_H_
