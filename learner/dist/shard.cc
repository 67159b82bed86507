#include "learner/dist/shard.h"

#include <algorithm>
#include <numeric>

namespace kernelrl::learner::dist {

std::vector<std::vector<int>> ShardByTokens(const std::vector<int64_t>& tokens, int world_size) {
  std::vector<std::vector<int>> shards(std::max(1, world_size));
  std::vector<int> order(tokens.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return tokens[a] > tokens[b]; });
  std::vector<int64_t> load(shards.size(), 0);
  for (int i : order) {
    const size_t r = std::min_element(load.begin(), load.end()) - load.begin();  // First minimum: lowest rank.
    shards[r].push_back(i);
    load[r] += tokens[i];
  }
  for (auto& s : shards) std::sort(s.begin(), s.end());
  return shards;
}

}  // namespace kernelrl::learner::dist
