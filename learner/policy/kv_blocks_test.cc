// The KV block manager: allocation and reference counts, prefix
// registration and matching along a chain, LRU eviction of unreferenced
// cached blocks, and a random workload that keeps the state invariants.
#include "learner/policy/kv_blocks.h"

#include <random>
#include <set>

#include "gtest/gtest.h"

namespace kernelrl::learner {
namespace {

std::vector<int32_t> Tokens(std::mt19937* rng, int n) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = std::uniform_int_distribution<int>(0, 1000)(*rng);
  return t;
}

// Registers the full blocks of `tokens` held in `blocks` (one per block).
void RegisterAll(KVBlockManager* m, const std::vector<int>& blocks, const std::vector<int32_t>& tokens) {
  uint64_t key = KVBlockManager::kRootKey;
  const int bs = m->block_size();
  for (size_t i = 0; i < blocks.size() && (i + 1) * bs <= tokens.size(); ++i) {
    key = m->Register(blocks[i], key, absl::MakeConstSpan(tokens).subspan(i * bs, bs));
  }
}

TEST(KVBlockManagerTest, AllocatesUntilEveryBlockIsReferenced) {
  KVBlockManager m(4, 8, true);
  std::set<int> got;
  for (int i = 0; i < 4; ++i) {
    auto b = m.Allocate();
    ASSERT_TRUE(b.has_value());
    got.insert(*b);
  }
  EXPECT_EQ(got.size(), 4u);
  EXPECT_FALSE(m.Allocate().has_value());
  m.Release(*got.begin());
  EXPECT_EQ(m.available(), 1);
  EXPECT_TRUE(m.Allocate().has_value());
}

TEST(KVBlockManagerTest, MatchesRegisteredPrefixChainAndSharesBlocks) {
  std::mt19937 rng(std::random_device{}());
  KVBlockManager m(16, 4, true);
  std::vector<int32_t> t = Tokens(&rng, 14);  // 3 full blocks + 2.
  std::vector<int> owned;
  for (int i = 0; i < 4; ++i) owned.push_back(*m.Allocate());
  RegisterAll(&m, owned, t);
  // A second sequence with the same first 9 tokens then different ones:
  // blocks 0 and 1 match, block 2 differs.
  std::vector<int32_t> u(t.begin(), t.begin() + 9);
  for (int i = 0; i < 7; ++i) u.push_back(t[9 + i % 5] + 1);
  std::vector<int> hit = m.Match(u, 100);
  ASSERT_EQ(hit.size(), 2u);
  EXPECT_EQ(hit[0], owned[0]);
  EXPECT_EQ(hit[1], owned[1]);
  // max_blocks bounds the match (the engine keeps one token to compute).
  std::vector<int> one = m.Match(t, 1);
  ASSERT_EQ(one.size(), 1u);
  // The same tokens at another offset (different parent) do not match.
  std::vector<int32_t> shifted(t.begin() + 4, t.end());
  EXPECT_TRUE(m.Match(shifted, 100).empty());
  // Shared blocks are referenced by every holder: releasing the owner's
  // copy keeps them referenced.
  for (int b : owned) m.Release(b);
  EXPECT_EQ(m.referenced(), 2);  // hit[0] (also one[0]) and hit[1].
  for (int b : hit) m.Release(b);
  for (int b : one) m.Release(b);
  EXPECT_EQ(m.referenced(), 0);
  EXPECT_EQ(m.cached(), 3);  // The three full registered blocks stay findable.
  EXPECT_EQ(m.Match(t, 100).size(), 3u);
}

TEST(KVBlockManagerTest, EvictsLeastRecentlyReleasedCachedBlockFirst) {
  std::mt19937 rng(std::random_device{}());
  KVBlockManager m(2, 4, true);
  std::vector<int32_t> a = Tokens(&rng, 4), b = Tokens(&rng, 4);
  int ba = *m.Allocate(), bb = *m.Allocate();
  m.Register(ba, KVBlockManager::kRootKey, a);
  m.Register(bb, KVBlockManager::kRootKey, b);
  m.Release(ba);  // a released first: evicted first.
  m.Release(bb);
  EXPECT_EQ(m.cached(), 2);
  EXPECT_EQ(*m.Allocate(), ba);
  EXPECT_TRUE(m.Match(a, 1).empty());
  ASSERT_EQ(m.Match(b, 1).size(), 1u);  // b survived, and is referenced again.
  EXPECT_FALSE(m.Allocate().has_value());
}

TEST(KVBlockManagerTest, DuplicateRegistrationKeepsTheFirstAndWithoutCachingNothingMatches) {
  std::mt19937 rng(std::random_device{}());
  KVBlockManager m(4, 4, true);
  std::vector<int32_t> a = Tokens(&rng, 4);
  int x = *m.Allocate(), y = *m.Allocate();
  m.Register(x, KVBlockManager::kRootKey, a);
  m.Register(y, KVBlockManager::kRootKey, a);
  m.Release(y);  // Private: straight back to free.
  EXPECT_EQ(m.cached(), 0);
  EXPECT_EQ(m.Match(a, 1), std::vector<int>{x});

  KVBlockManager off(4, 4, false);
  int z = *off.Allocate();
  off.Register(z, KVBlockManager::kRootKey, a);
  EXPECT_TRUE(off.Match(a, 1).empty());
  off.Release(z);
  EXPECT_EQ(off.cached(), 0);
}

TEST(KVBlockManagerTest, RandomWorkloadKeepsCounts) {
  std::mt19937 rng(std::random_device{}());
  const int kBlocks = 24, kBs = 4;
  KVBlockManager m(kBlocks, kBs, true);
  std::vector<int32_t> shared = Tokens(&rng, 12);
  std::vector<std::vector<int>> seqs;
  for (int step = 0; step < 2000; ++step) {
    const int op = std::uniform_int_distribution<int>(0, 2)(rng);
    if (op < 2) {  // A sequence: the shared prefix (sometimes), then its own.
      std::vector<int32_t> t = std::uniform_int_distribution<int>(0, 1)(rng) ? shared : std::vector<int32_t>();
      auto own = Tokens(&rng, std::uniform_int_distribution<int>(1, 10)(rng));
      t.insert(t.end(), own.begin(), own.end());
      const int need = (static_cast<int>(t.size()) + kBs - 1) / kBs;
      std::vector<int> blocks = m.Match(t, (static_cast<int>(t.size()) - 1) / kBs);
      bool ok = true;
      while (static_cast<int>(blocks.size()) < need) {
        auto b = m.Allocate();
        if (!b) { ok = false; break; }
        blocks.push_back(*b);
      }
      if (!ok) {
        for (int b : blocks) m.Release(b);
      } else {
        RegisterAll(&m, blocks, t);
        seqs.push_back(blocks);
      }
    } else if (!seqs.empty()) {
      const size_t i = std::uniform_int_distribution<size_t>(0, seqs.size() - 1)(rng);
      for (int b : seqs[i]) m.Release(b);
      seqs.erase(seqs.begin() + i);
    }
    std::set<int> held;
    for (const auto& s : seqs) held.insert(s.begin(), s.end());
    ASSERT_EQ(m.referenced(), static_cast<int>(held.size())) << "step " << step;
    ASSERT_LE(m.available() + m.referenced(), kBlocks);
  }
}

}  // namespace
}  // namespace kernelrl::learner
