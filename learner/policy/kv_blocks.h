// The paged KV cache's bookkeeping: which fixed-size blocks of the cache a
// sequence owns, which blocks hold a full block of some token prefix (the
// prefix cache), and which can be reused. No tensors: the engine owns the
// cache storage, [kv_heads, num_blocks, block_size, head_dim] per layer
// (learner/model.h PagedKVCache), and indexes it with the block ids handed
// out here.
//
// Invariants:
//  * A block is in exactly one of three states: referenced (ref > 0, owned
//    by one or more sequences), cached (ref == 0, holds a registered prefix
//    block, on the LRU list, reusable by a prefix match or evictable), or
//    free (ref == 0, no content that anyone can find).
//  * A registered block holds the keys/values of a full block of tokens
//    whose whole prefix is known: its key is the hash of the token ids of
//    every block from the sequence's start to this one (a chain: the
//    parent's key hashed with this block's ids). Lookups also compare the
//    block's own ids and its parent's key, so a hash collision cannot hand
//    out wrong keys/values.
//  * Only full blocks are shared, and a sequence only ever writes the
//    positions after its shared prefix, into blocks it alone references: no
//    copy-on-write is needed.
//  * Allocate() takes a free block first, then evicts the least recently
//    released cached block; it fails only when every block is referenced.
//
// Not thread-safe: the engine thread is the only user.
#ifndef KERNELRL_LEARNER_POLICY_KV_BLOCKS_H_
#define KERNELRL_LEARNER_POLICY_KV_BLOCKS_H_

#include <cstdint>
#include <list>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace kernelrl::learner {

class KVBlockManager {
 public:
  KVBlockManager(int num_blocks, int block_size, bool prefix_caching);

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  int block_size() const { return block_size_; }
  // Blocks Allocate() can hand out now (free + evictable cached).
  int available() const { return static_cast<int>(free_.size() + lru_.size()); }
  int referenced() const { return num_blocks() - available(); }
  int cached() const { return static_cast<int>(lru_.size()); }

  // A block with ref 1 and no registered content, or nullopt when every
  // block is referenced.
  std::optional<int> Allocate();
  void Release(int block);  // Drops one reference.

  // The key of the block after `parent_key` holding `tokens` (block_size ids).
  static uint64_t ChainKey(uint64_t parent_key, absl::Span<const int32_t> tokens);
  static constexpr uint64_t kRootKey = 0x6b65726e656c726cULL;

  // The longest chain of registered blocks holding tokens[0, n * block_size)
  // for n <= max_blocks, each taken (ref + 1). Returns their ids in order;
  // *key (if set) becomes the last matched block's key (kRootKey if none).
  std::vector<int> Match(absl::Span<const int32_t> tokens, int max_blocks, uint64_t* key = nullptr);
  // Whether the block after `parent_key` with these ids is registered.
  bool Contains(uint64_t parent_key, absl::Span<const int32_t> tokens) const;
  // Registers `block` (referenced by the caller, now full) as the block
  // after `parent_key` holding `tokens`. If another block already holds that
  // key, `block` stays private. Returns the block's key either way.
  uint64_t Register(int block, uint64_t parent_key, absl::Span<const int32_t> tokens);

  // Forgets every registration and reference: all blocks free (new weights
  // make every cached key/value stale).
  void Reset();

 private:
  struct Block {
    int ref = 0;
    bool registered = false;
    uint64_t key = 0, parent_key = 0;
    std::vector<int32_t> tokens;  // Registered blocks only.
    std::list<int>::iterator lru;  // Valid while cached.
  };
  void Unregister(int block);

  const int block_size_;
  const bool prefix_caching_;
  std::vector<Block> blocks_;
  std::vector<int> free_;                          // Stack of free ids.
  std::list<int> lru_;                             // Cached blocks, least recently released first.
  absl::flat_hash_map<uint64_t, int> by_key_;      // Registered blocks.
};

}  // namespace kernelrl::learner

#endif  // KERNELRL_LEARNER_POLICY_KV_BLOCKS_H_
