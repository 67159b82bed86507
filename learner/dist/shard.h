// How a global batch is split over data-parallel ranks (torch-free).
//
// Every rank must see the same split, so the split is a pure function of the
// trajectories' token counts: longest first, each to the rank with the fewest
// tokens so far (ties: the lower rank). Step time is set by the slowest rank,
// so balance is by tokens, not by count. Each rank's indices are returned in
// increasing order (the global batch's order within the shard).
#ifndef KERNELRL_LEARNER_DIST_SHARD_H_
#define KERNELRL_LEARNER_DIST_SHARD_H_

#include <cstdint>
#include <vector>

namespace kernelrl::learner::dist {

// tokens[i]: token count of trajectory i. Returns world_size lists of
// indices; together they hold every index exactly once. A rank's list is
// empty when there are fewer trajectories than ranks.
std::vector<std::vector<int>> ShardByTokens(const std::vector<int64_t>& tokens, int world_size);

}  // namespace kernelrl::learner::dist

#endif  // KERNELRL_LEARNER_DIST_SHARD_H_
