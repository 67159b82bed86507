#include "learner/policy/kv_blocks.h"

#include <algorithm>

namespace kernelrl::learner {
namespace {

// splitmix64's finaliser: a cheap, well-mixed step per token.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace

KVBlockManager::KVBlockManager(int num_blocks, int block_size, bool prefix_caching)
    : block_size_(block_size), prefix_caching_(prefix_caching), blocks_(num_blocks) {
  Reset();
}

void KVBlockManager::Reset() {
  for (Block& b : blocks_) b = Block();
  lru_.clear();
  by_key_.clear();
  free_.clear();
  for (int i = num_blocks() - 1; i >= 0; --i) free_.push_back(i);
}

uint64_t KVBlockManager::ChainKey(uint64_t parent_key, absl::Span<const int32_t> tokens) {
  uint64_t h = Mix(parent_key);
  for (int32_t t : tokens) h = Mix(h ^ static_cast<uint32_t>(t));
  return h;
}

std::optional<int> KVBlockManager::Allocate() {
  int id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    id = lru_.front();  // Evict the least recently released cached block.
    lru_.pop_front();
    Unregister(id);
  } else {
    return std::nullopt;
  }
  blocks_[id].ref = 1;
  return id;
}

void KVBlockManager::Release(int block) {
  Block& b = blocks_[block];
  if (--b.ref > 0) return;
  if (b.registered) {
    b.lru = lru_.insert(lru_.end(), block);
  } else {
    free_.push_back(block);
  }
}

void KVBlockManager::Unregister(int block) {
  Block& b = blocks_[block];
  if (!b.registered) return;
  by_key_.erase(b.key);
  b.registered = false;
  b.tokens.clear();
}

bool KVBlockManager::Contains(uint64_t parent_key, absl::Span<const int32_t> tokens) const {
  auto it = by_key_.find(ChainKey(parent_key, tokens));
  if (it == by_key_.end()) return false;
  const Block& b = blocks_[it->second];
  return b.parent_key == parent_key && std::equal(tokens.begin(), tokens.end(), b.tokens.begin(), b.tokens.end());
}

std::vector<int> KVBlockManager::Match(absl::Span<const int32_t> tokens, int max_blocks, uint64_t* key_out) {
  std::vector<int> out;
  uint64_t key = kRootKey;
  if (key_out != nullptr) *key_out = key;
  if (!prefix_caching_) return out;
  const int n = std::min<int>(max_blocks, static_cast<int>(tokens.size()) / block_size_);
  for (int i = 0; i < n; ++i) {
    absl::Span<const int32_t> ids = tokens.subspan(static_cast<size_t>(i) * block_size_, block_size_);
    if (!Contains(key, ids)) break;
    key = ChainKey(key, ids);
    const int id = by_key_.at(key);
    Block& b = blocks_[id];
    if (b.ref++ == 0) lru_.erase(b.lru);  // Cached -> referenced.
    out.push_back(id);
  }
  if (key_out != nullptr) *key_out = key;
  return out;
}

uint64_t KVBlockManager::Register(int block, uint64_t parent_key, absl::Span<const int32_t> tokens) {
  const uint64_t key = ChainKey(parent_key, tokens);
  if (!prefix_caching_ || by_key_.contains(key)) return key;
  Block& b = blocks_[block];
  b.registered = true;
  b.key = key;
  b.parent_key = parent_key;
  b.tokens.assign(tokens.begin(), tokens.end());
  by_key_[key] = block;
  return key;
}

}  // namespace kernelrl::learner
