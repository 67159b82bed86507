// Random training batches, and how data-parallel ranks split them, for the
// trainer's and the parallel backends' tests.
#ifndef KERNELRL_LEARNER_RL_TEST_BATCH_H_
#define KERNELRL_LEARNER_RL_TEST_BATCH_H_

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "learner/dist/shard.h"
#include "learner/rl/sample.h"

namespace kernelrl::learner::rl::testing {

// n trajectories of random length (4..23) over a vocabulary of `vocab` ids, a
// random mask (position 0 never a model token, at least one model token),
// random rollout log-probs, rewards in [-1, 1] and length-clipped flags; the
// same seed gives the same batch, so two backends can be fed alike.
inline std::vector<Sample> RandomBatch(int n, uint64_t seed, int vocab = 32) {
  std::mt19937_64 rng(seed);
  std::vector<Sample> out;
  for (int i = 0; i < n; ++i) {
    Sample s;
    s.id = absl::StrCat("t", i);
    const int len = 4 + static_cast<int>(rng() % 20);
    for (int t = 0; t < len; ++t) {
      const bool model = t > 0 && (t == len - 1 || rng() % 3 != 0);
      s.ids.push_back(static_cast<int32_t>(rng() % vocab));
      s.loss_mask.push_back(model);
      s.rollout_logprobs.push_back(model ? -0.05f - static_cast<float>(rng() % 3000) / 1000.0f : 0.0f);
    }
    s.reward = static_cast<double>(rng() % 2001) / 1000.0 - 1.0;
    s.length_clipped = rng() % 4 == 0;
    out.push_back(std::move(s));
  }
  return out;
}

// Rank `rank`'s part of `batch` when `world` ranks split it as the trainer's
// data-parallel backends do (dist::ShardByTokens).
inline std::vector<Sample> ShardOf(const std::vector<Sample>& batch, int rank, int world) {
  std::vector<int64_t> tokens;
  for (const Sample& s : batch) tokens.push_back(static_cast<int64_t>(s.ids.size()));
  const std::vector<std::vector<int>> shards = dist::ShardByTokens(tokens, world);
  std::vector<Sample> out;
  for (int i : shards[rank]) out.push_back(batch[i]);
  return out;
}

}  // namespace kernelrl::learner::rl::testing

#endif  // KERNELRL_LEARNER_RL_TEST_BATCH_H_
