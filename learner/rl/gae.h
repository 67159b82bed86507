// Generalized advantage estimation on plain vectors (torch-free): the
// critic's values come off the device once per trajectory, the recursion
// runs here, the advantages go back as one tensor.
//
// Steps are a trajectory's model tokens in order (tool output and template
// tokens are the environment, not steps). values[k] = V(state before token k),
// rewards[k] the reward after token k (the outcome reward sits on the last
// one, 0 elsewhere); the value after the last step is 0 (episode over).
//   delta_k = rewards[k] + gamma * V[k+1] - V[k]
//   A_k     = delta_k + gamma * lambda * A_{k+1}
//   return_k = A_k + V[k]        (the critic's target)
#ifndef KERNELRL_LEARNER_RL_GAE_H_
#define KERNELRL_LEARNER_RL_GAE_H_

#include <cstdint>
#include <vector>

namespace kernelrl::learner::rl {

struct GaeResult {
  std::vector<float> advantages;
  std::vector<float> returns;
};

// rewards.size() == values.size().
GaeResult Gae(const std::vector<float>& rewards, const std::vector<float>& values, double gamma, double lambda);

// VAPO's length-adaptive lambda for a trajectory of n steps: 1 - 1 / (alpha n),
// so that the reward's weight at the first step, lambda^n, stays near
// e^(-1/alpha) whatever the length (clamped to [0, 1]).
double LengthAdaptiveLambda(int64_t n, double alpha);

// Outcome reward: `reward` on the last of n steps, 0 before.
std::vector<float> OutcomeRewards(int n, double reward);

// The paper's value-pretraining targets for one trajectory: V + GAE with
// gamma 1, lambda 0.95 on its outcome reward. Its explained-variance curve
// (0.3-0.45 with value pretraining) is against these, which sit near the
// critic's own values a few dozen tokens ahead; against the Monte-Carlo
// return (lambda_critic 1) the same critic reads lower.
std::vector<float> PaperValueTargets(const std::vector<float>& values, double reward);

// 1 - Var(returns - values) / Var(returns); 0 when returns do not vary.
double ExplainedVariance(const std::vector<float>& values, const std::vector<float>& returns);

// The same from sums over n tokens of the targets, their squares, the residuals (target - value)
// and theirs: what the trainer reduces over ranks, and what a reader pools over updates. 0 when the
// targets do not vary (to 1e-12 of their mean square).
double ExplainedVarianceOfSums(double n, double target_sum, double target_sq_sum, double residual_sum,
                               double residual_sq_sum);

}  // namespace kernelrl::learner::rl

#endif  // KERNELRL_LEARNER_RL_GAE_H_
