// What the trainer consumes, torch-free: a trajectory reduced to token ids,
// the loss mask, the rollout's log-probs and the outcome reward, checked once
// at ingest; and sequence packing of samples into rows of bounded length.
//
// Index convention (the Trajectory proto's): logprobs[t] is the rollout's
// log-prob of ids[t], set where loss_mask[t] == 1. The hidden state at t-1
// predicts ids[t], so ids[0] is never a model token.
#ifndef KERNELRL_LEARNER_RL_SAMPLE_H_
#define KERNELRL_LEARNER_RL_SAMPLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/trajectory.pb.h"

namespace kernelrl::learner::rl {

struct Sample {
  std::string id;
  std::string task_id;                   // The task it is a rollout of ("" = unknown).
  std::vector<int32_t> ids;
  std::vector<uint8_t> loss_mask;        // 1 = model token: trained on.
  std::vector<float> rollout_logprobs;   // Per token; 0 where loss_mask is 0.
  double reward = 0;                     // Outcome reward, on the last model token.
  double baseline = 0;                   // Subtracted from the reward before GAE (SetTaskBaselines).
  int64_t policy_version = 0;            // Version that sampled it.
  bool length_clipped = false;           // Cut at the token or turn limit.
  int64_t model_tokens() const;
};

// Checks and converts. InvalidArgument naming the problem for: size
// mismatches, a mask other than 0/1, no model token, a model token at
// position 0, ids outside [0, vocab_size) (vocab_size > 0), non-finite or
// positive log-probs, more than max_tokens tokens (max_tokens > 0).
absl::StatusOr<Sample> SampleFromTrajectory(const v1::Trajectory& trajectory, int64_t vocab_size,
                                            int64_t max_tokens);

// Per-task baselines (PpoConfig.task_baseline), leave-one-out: each
// sample's baseline is the mean reward of the batch's other rollouts of its
// task; a task with one rollout in the batch falls back to the mean of every
// other sample (the batch baseline); a batch of one gets 0. A baseline never
// depends on the sample's own reward, so the policy gradient stays unbiased,
// and adding a constant to every reward of a task (of two or more rollouts)
// leaves reward - baseline unchanged: what one task pays more than another
// no longer reaches the gradient, only how a rollout did against its task.
void SetTaskBaselines(std::vector<Sample>* batch);

// The explained variance of the best critic that knows only which task a
// rollout is of: each model token's value the batch's mean reward of its task
// (every model token weighted alike, as the critic's explained variance is).
// What the task line alone explains of a batch's returns; 0 when the batch's
// rewards are all equal.
double TaskMeansExplainedVariance(const std::vector<Sample>& batch);

// A row of packed samples: their indices, in order, and lengths.
struct PackedRow {
  std::vector<int> samples;
  std::vector<int64_t> lengths;
  int64_t tokens = 0;
};

// First-fit decreasing into rows of at most max_tokens_per_row tokens; a
// sample longer than the bound gets a row of its own. Deterministic.
std::vector<PackedRow> PackRows(const std::vector<Sample>& samples, int64_t max_tokens_per_row);

}  // namespace kernelrl::learner::rl

#endif  // KERNELRL_LEARNER_RL_SAMPLE_H_
