#include "learner/dist/shard.h"

#include <algorithm>
#include <random>

#include "gtest/gtest.h"

namespace kernelrl::learner::dist {
namespace {

TEST(ShardTest, EveryTrajectoryOnceAndTokensBalanced) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 50; ++trial) {
    const int world = 1 + static_cast<int>(rng() % 8);
    const int n = static_cast<int>(rng() % 40);
    std::vector<int64_t> tokens;
    for (int i = 0; i < n; ++i) tokens.push_back(1 + static_cast<int64_t>(rng() % 5000));
    auto shards = ShardByTokens(tokens, world);
    ASSERT_EQ(shards.size(), static_cast<size_t>(world));
    std::vector<int> seen;
    int64_t max_load = 0, min_load = INT64_MAX, longest = 0;
    for (const auto& s : shards) {
      EXPECT_TRUE(std::is_sorted(s.begin(), s.end()));
      int64_t load = 0;
      for (int i : s) seen.push_back(i), load += tokens[i];
      max_load = std::max(max_load, load), min_load = std::min(min_load, load);
    }
    for (int64_t t : tokens) longest = std::max(longest, t);
    std::sort(seen.begin(), seen.end());
    std::vector<int> all(n);
    for (int i = 0; i < n; ++i) all[i] = i;
    EXPECT_EQ(seen, all);
    // Greedy longest-first: loads differ by at most the longest trajectory.
    if (n > 0) {
      EXPECT_LE(max_load - min_load, longest);
    }
    EXPECT_EQ(ShardByTokens(tokens, world), shards);  // Deterministic: every rank computes the same split.
  }
}

TEST(ShardTest, FewerTrajectoriesThanRanksLeavesEmptyShards) {
  auto shards = ShardByTokens({7, 9}, 4);
  EXPECT_EQ(shards[0], std::vector<int>{1});  // The longest goes to rank 0.
  EXPECT_EQ(shards[1], std::vector<int>{0});
  EXPECT_TRUE(shards[2].empty());
  EXPECT_TRUE(shards[3].empty());
}

}  // namespace
}  // namespace kernelrl::learner::dist
