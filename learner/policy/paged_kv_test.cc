// Paged attention against the contiguous paths on a tiny random model (CPU,
// fp32): several sequences of different (and two of equal) lengths, two sharing a prompt
// prefix whose blocks the second one reuses (prefilling only its own
// tokens), one prefilled in two chunks, then many decode steps in one
// batch. Every step's logits equal a full forward of the whole sequence and
// the contiguous KV cache's Prefill/Decode. KERNELRL_TEST_DEVICE=cuda runs
// it on the GPU (fp32), as tools/device_engine.sh does; CI runs it on the CPU.
#include <c10/core/GradMode.h>

#include <cstdlib>
#include <optional>
#include <random>

#include "gtest/gtest.h"
#include "learner/model.h"
#include "learner/policy/decode_graphs.h"
#include "learner/policy/kv_blocks.h"
#include "learner/test_util.h"

namespace kernelrl::learner {
namespace {

constexpr int kVocab = 97;
constexpr int kBlock = 4;

ModelOptions TestOptions() {
  ModelOptions o;
  const char* d = std::getenv("KERNELRL_TEST_DEVICE");
  if (d != nullptr && std::string(d) == "cuda") o.device = at::Device(at::kCUDA, 0);
  return o;
}

std::unique_ptr<Transformer> TinyModel(uint64_t seed) {
  ModelConfig c = learner::testing::TinyQwen2Config(kVocab);
  c.max_position_embeddings = 256;
  auto m = Transformer::Create(c, Head::kLanguageModel, TestOptions(), seed);
  EXPECT_TRUE(m.ok());
  c10::AutoGradMode no_grad(false);
  for (at::Tensor& p : (*m)->parameters()) {
    if (p.dim() == 2) p.mul_(8.0);  // Larger than HF's init: logits far from uniform.
  }
  return std::move(*m);
}

std::vector<int32_t> Random(std::mt19937* rng, int n) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = std::uniform_int_distribution<int>(0, kVocab - 1)(*rng);
  return t;
}

// Logits at the last position of a full, cache-free forward.
at::Tensor FullLast(const Transformer& m, const std::vector<int32_t>& seq) {
  at::Tensor ids = at::tensor(std::vector<int64_t>(seq.begin(), seq.end()), at::kLong).view({1, -1});
  return m.Logits(ids.to(m.options().device))[0][-1];
}

struct Seq {
  std::vector<int32_t> tokens;
  int64_t cached = 0;
  std::vector<int32_t> blocks;
  uint64_t key = KVBlockManager::kRootKey;
  int64_t registered = 0;
};

void Grow(KVBlockManager* m, Seq* s, int64_t positions) {
  while (static_cast<int64_t>(s->blocks.size()) * kBlock < positions) {
    auto b = m->Allocate();
    ASSERT_TRUE(b.has_value());
    s->blocks.push_back(*b);
  }
}

void RegisterFull(KVBlockManager* m, Seq* s) {
  for (; (s->registered + 1) * kBlock <= s->cached; ++s->registered) {
    auto ids = absl::MakeConstSpan(s->tokens).subspan(s->registered * kBlock, kBlock);
    s->key = m->Register(s->blocks[s->registered], s->key, ids);
  }
}

// One PagedForward over seqs[i] with n[i] new tokens each; returns logits.
at::Tensor Step(const Transformer& model, PagedKVCache* cache, KVBlockManager* m, std::vector<Seq*> seqs,
                std::vector<int64_t> n) {
  PagedBatch batch;
  std::vector<int64_t> ids;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq* s = seqs[i];
    Grow(m, s, s->cached + n[i]);
    batch.starts.push_back(s->cached);
    batch.lengths.push_back(n[i]);
    batch.block_tables.push_back(s->blocks);
    ids.insert(ids.end(), s->tokens.begin() + s->cached, s->tokens.begin() + s->cached + n[i]);
  }
  at::Tensor logits = model.PagedForward(ids, batch, cache);
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i]->cached += n[i];
    RegisterFull(m, seqs[i]);
  }
  return logits;
}

void ExpectClose(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  const double diff = (got - want).abs().max().item<double>();
  EXPECT_LT(diff, 2e-4 * std::max(1.0, want.abs().max().item<double>())) << what << ": max |diff| " << diff;
}

TEST(PagedKVTest, PagedLogitsEqualContiguousWithSharedPrefixesChunksAndDecode) {
  c10::AutoGradMode no_grad(false);
  std::mt19937 rng(std::random_device{}());
  auto model = TinyModel(rng());
  const at::TensorOptions opts = at::TensorOptions().dtype(at::kFloat).device(model->options().device);
  PagedKVCache cache(model->config(), 64, kBlock, opts);
  KVBlockManager blocks(64, kBlock, /*prefix_caching=*/true);

  const std::vector<int32_t> prompt = Random(&rng, 10);  // Shared by a and b: 2 full blocks.
  Seq a, b, c, d, e;
  a.tokens = prompt;
  for (int32_t t : Random(&rng, 3)) a.tokens.push_back(t);
  b.tokens = prompt;
  for (int32_t t : Random(&rng, 7)) b.tokens.push_back(t);
  c.tokens = Random(&rng, 6);
  d.tokens = Random(&rng, 21);
  e.tokens = Random(&rng, 6);  // c's length: c and e attend in one call.

  // a alone, in two chunks (6 tokens, then 7 on top of the cached 6).
  Step(*model, &cache, &blocks, {&a}, {6});
  at::Tensor la = Step(*model, &cache, &blocks, {&a}, {7});
  ExpectClose(la[0], FullLast(*model, a.tokens), "a after chunked prefill");

  // b reuses a's two full prompt blocks and prefills only its other 9
  // tokens, packed with c and d (no prefix) in one call.
  b.blocks = blocks.Match(b.tokens, (static_cast<int>(b.tokens.size()) - 1) / kBlock);
  ASSERT_EQ(b.blocks.size(), 2u);
  EXPECT_EQ(b.blocks[0], a.blocks[0]);
  b.cached = 8;
  b.registered = 2;
  b.key = KVBlockManager::ChainKey(KVBlockManager::ChainKey(KVBlockManager::kRootKey,
                                                            absl::MakeConstSpan(prompt).subspan(0, 4)),
                                   absl::MakeConstSpan(prompt).subspan(4, 4));
  at::Tensor lbcd = Step(*model, &cache, &blocks, {&b, &c, &e, &d}, {9, 6, 6, 21});
  ExpectClose(lbcd[0], FullLast(*model, b.tokens), "b after prefix reuse");
  ExpectClose(lbcd[1], FullLast(*model, c.tokens), "c");
  ExpectClose(lbcd[2], FullLast(*model, e.tokens), "e");
  ExpectClose(lbcd[3], FullLast(*model, d.tokens), "d");

  // The contiguous cache, prefilled with the same sequences (one row each).
  KVCache contiguous(model->config(), 5, 64, opts);
  std::vector<Seq*> all = {&a, &b, &c, &e, &d};
  for (int64_t r = 0; r < 5; ++r) {
    const auto& t = all[r]->tokens;
    model->Prefill(at::tensor(std::vector<int64_t>(t.begin(), t.end()), at::kLong).view({1, -1}).to(opts.device()),
                   at::tensor(std::vector<int64_t>{r}, at::kLong).to(opts.device()), &contiguous);
  }
  at::Tensor next = at::stack({la[0], lbcd[0], lbcd[1], lbcd[2], lbcd[3]}).argmax(-1).cpu();
  for (int step = 0; step < 20; ++step) {
    std::vector<int64_t> ids, rows, positions;
    for (int64_t r = 0; r < 5; ++r) {
      all[r]->tokens.push_back(static_cast<int32_t>(next[r].item<int64_t>()));
      ids.push_back(all[r]->tokens.back());
      rows.push_back(r);
      positions.push_back(static_cast<int64_t>(all[r]->tokens.size()) - 1);
    }
    at::Tensor paged = Step(*model, &cache, &blocks, all, {1, 1, 1, 1, 1});
    at::Tensor dense = model->Decode(ids, rows, positions, &contiguous);
    for (int64_t r = 0; r < 5; ++r) {
      const std::string what = "decode step " + std::to_string(step) + " sequence " + std::to_string(r);
      ExpectClose(paged[r], dense[r], what + " vs contiguous cache");
      if (step % 5 == 4) ExpectClose(paged[r], FullLast(*model, all[r]->tokens), what + " vs full forward");
    }
    next = paged.argmax(-1).cpu();
  }
  // a and b still share their two prompt blocks; nothing else is shared.
  EXPECT_EQ(a.blocks[0], b.blocks[0]);
  EXPECT_EQ(a.blocks[1], b.blocks[1]);
  EXPECT_NE(a.blocks[2], b.blocks[2]);
}


// The fixed-shape decode step (CUDA graphs on the GPU, the same step
// uncaptured on the CPU) equals the eager one: 3 sequences (a batch bucket
// of 4, one padding row) of different lengths crossing block and bucket
// boundaries over 24 steps, the graph's cache writes included (each path
// runs on its own copy of the cache).
TEST(PagedKVTest, FixedShapeDecodeEqualsEager) {
  c10::AutoGradMode no_grad(false);
  std::mt19937 rng(std::random_device{}());
  auto model = TinyModel(rng());
  const at::TensorOptions opts = at::TensorOptions().dtype(at::kFloat).device(model->options().device);
  PagedKVCache eager(model->config(), 33, kBlock, opts), graphed(model->config(), 33, kBlock, opts);
  KVBlockManager blocks(32, kBlock, /*prefix_caching=*/false);  // Block 32: the graphs' scratch.
  DecodeGraphs graphs(model.get(), &graphed, /*trash_block=*/32, /*max_blocks=*/16);
  Seq a, b, c;
  a.tokens = Random(&rng, 3);
  b.tokens = Random(&rng, 9);
  c.tokens = Random(&rng, 14);
  std::vector<Seq*> all = {&a, &b, &c};
  Step(*model, &eager, &blocks, all, {3, 9, 14});
  for (int l = 0; l < model->config().num_layers; ++l) {
    graphed.k[l].copy_(eager.k[l]);
    graphed.v[l].copy_(eager.v[l]);
  }
  for (Seq* s : all) s->tokens.push_back(Random(&rng, 1)[0]);
  for (int step = 0; step < 24; ++step) {
    std::vector<int64_t> ids, positions;
    std::vector<std::vector<int32_t>> tables;
    for (Seq* s : all) {
      Grow(&blocks, s, s->cached + 1);
      ids.push_back(s->tokens.back());
      positions.push_back(s->cached);
      tables.push_back(s->blocks);
    }
    std::optional<at::Tensor> fixed = graphs.Decode(ids, positions, tables);
    ASSERT_TRUE(fixed.has_value()) << "the fixed-shape step turned itself off";
    at::Tensor want = Step(*model, &eager, &blocks, all, {1, 1, 1});
    ExpectClose(*fixed, want, "decode step " + std::to_string(step));
    at::Tensor next = want.argmax(-1).cpu();
    for (int64_t r = 0; r < 3; ++r) all[r]->tokens.push_back(static_cast<int32_t>(next[r].item<int64_t>()));
  }
  if (model->options().device.is_cuda()) {
    EXPECT_GT(graphs.captured(), 1);
  }
}

}  // namespace
}  // namespace kernelrl::learner
