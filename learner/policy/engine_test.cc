// The policy engine on CPU with a tiny random model: batched/continuous
// generation equals one-at-a-time greedy decoding, logprobs equal a full
// forward pass, seeds reproduce, top-p/stop/eos/max-tokens/context limits,
// and a weight swap mid-traffic drops nothing and stamps versions right.
#include "learner/policy/engine.h"

#include <c10/core/GradMode.h>

#include <future>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "learner/model.h"
#include "learner/test_util.h"

namespace kernelrl::learner {
namespace {

ModelConfig TinyConfig() {
  ModelConfig c = learner::testing::TinyQwen2Config(101);
  c.max_position_embeddings = 256;
  return c;
}

std::unique_ptr<Transformer> TinyModel(uint64_t seed) {
  // Larger init than HF's 0.02 so greedy choices are not near-ties.
  ModelConfig c = TinyConfig();
  auto m = Transformer::Create(c, Head::kLanguageModel, {}, seed);
  EXPECT_TRUE(m.ok());
  c10::AutoGradMode no_grad(false);
  for (at::Tensor& p : (*m)->parameters()) {
    if (p.dim() == 2) p.mul_(8.0);
  }
  return std::move(*m);
}

std::vector<int32_t> RandomPrompt(std::mt19937* rng, int len) {
  std::vector<int32_t> p(len);
  for (auto& t : p) t = std::uniform_int_distribution<int>(0, 100)(*rng);
  return p;
}

// Greedy by full recomputation (no cache), the reference.
std::vector<int32_t> ReferenceGreedy(const Transformer& m, std::vector<int32_t> prompt, int n) {
  c10::AutoGradMode no_grad(false);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    at::Tensor ids = at::tensor(std::vector<int64_t>(prompt.begin(), prompt.end()), at::kLong).view({1, -1});
    int32_t next = static_cast<int32_t>(m.Logits(ids)[0][-1].argmax().item<int64_t>());
    out.push_back(next);
    prompt.push_back(next);
  }
  return out;
}

EngineOptions Options(int batch, int64_t max_len = 128) {
  EngineOptions o;
  o.max_batch = batch;
  o.max_seq_len = max_len;
  o.max_prefill_tokens = 40;  // Small: exercises chunked prefill.
  return o;
}

TEST(PolicyEngineTest, ConcurrentGreedyRequestsEqualReferenceDecoding) {
  auto model = TinyModel(1);
  const Transformer* ref = model.get();
  PolicyEngine engine(std::move(model), 7, "ckpt/v7", Options(4));
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 10; ++i) prompts.push_back(RandomPrompt(&rng, 3 + 2 * i));  // 10 requests, 4 slots.
  std::vector<std::future<absl::StatusOr<GenerationResult>>> futures;
  for (int i = 0; i < 10; ++i) {
    GenerationRequest r;
    r.prompt = prompts[i];
    r.sampling.temperature = 0;
    r.sampling.max_new_tokens = 12 + i;  // Different lengths: slots free up at different steps.
    futures.push_back(std::async(std::launch::async, [&engine, r] { return engine.Generate(r); }));
  }
  for (int i = 0; i < 10; ++i) {
    auto res = futures[i].get();
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->policy_version, 7);
    EXPECT_EQ(res->finish_reason, "max_new_tokens");
    EXPECT_EQ(res->output_ids, ReferenceGreedy(*ref, prompts[i], 12 + i)) << "request " << i;
    EXPECT_EQ(res->logprobs.size(), res->output_ids.size());
  }
  EXPECT_EQ(engine.GetInfo().requests_completed, 10);
}

TEST(PolicyEngineTest, SampledLogprobsMatchFullForwardAndSeedsReproduce) {
  auto model = TinyModel(2);
  const Transformer* ref = model.get();
  PolicyEngine engine(std::move(model), 1, "", Options(3));
  std::mt19937 rng(5);
  GenerationRequest r;
  r.prompt = RandomPrompt(&rng, 9);
  r.sampling.temperature = 0.8f;
  r.sampling.max_new_tokens = 20;
  r.sampling.seed = 1234;
  auto a = engine.Generate(r);
  auto b = engine.Generate(r);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->output_ids, b->output_ids);
  r.sampling.seed = 999;
  auto c = engine.Generate(r);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->output_ids, c->output_ids);
  // logprob of each sampled token = log softmax(logits / T) of a full forward.
  c10::AutoGradMode no_grad(false);
  std::vector<int64_t> seq(r.prompt.begin(), r.prompt.end());
  seq.insert(seq.end(), a->output_ids.begin(), a->output_ids.end());
  at::Tensor logits = ref->Logits(at::tensor(seq, at::kLong).view({1, -1}))[0] / 0.8;
  at::Tensor logp = at::log_softmax(logits, -1);
  for (size_t i = 0; i < a->output_ids.size(); ++i) {
    float want = logp[r.prompt.size() - 1 + i][a->output_ids[i]].item<float>();
    EXPECT_NEAR(a->logprobs[i], want, 1e-4) << "token " << i;
  }
}

TEST(PolicyEngineTest, TinyTopPIsGreedyAndStopsAreHonoured) {
  auto model = TinyModel(3);
  const Transformer* ref = model.get();
  EngineOptions o = Options(2, 40);
  o.eos_ids = {};
  PolicyEngine engine(std::move(model), 1, "", o);
  std::mt19937 rng(9);
  std::vector<int32_t> prompt = RandomPrompt(&rng, 6);
  std::vector<int32_t> greedy = ReferenceGreedy(*ref, prompt, 20);

  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 1.5f;
  r.sampling.top_p = 1e-6f;  // Only the most likely token survives.
  r.sampling.max_new_tokens = 20;
  auto res = engine.Generate(r);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->output_ids, greedy);

  r.sampling.temperature = 0;
  r.sampling.stop_sequences = {{greedy[5], greedy[6]}, {-5}};
  res = engine.Generate(r);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->finish_reason, "stop_sequence");
  // Stops at the first place the stop sequence completes (it may occur earlier than index 6).
  ASSERT_LE(res->output_ids.size(), 7u);
  EXPECT_EQ(std::vector<int32_t>(res->output_ids.end() - 2, res->output_ids.end()),
            (std::vector<int32_t>{greedy[5], greedy[6]}));

  r.sampling.stop_sequences.clear();
  r.sampling.max_new_tokens = 0;  // Up to the context: 40 - 6 tokens.
  res = engine.Generate(r);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->finish_reason, "context_length");
  EXPECT_EQ(res->output_ids.size(), 34u);

  r.prompt = std::vector<int32_t>(40, 1);
  EXPECT_EQ(engine.Generate(r).status().code(), absl::StatusCode::kInvalidArgument);
  r.prompt = {5, 101};
  EXPECT_EQ(engine.Generate(r).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PolicyEngineTest, EosEndsGeneration) {
  auto model = TinyModel(4);
  const Transformer* ref = model.get();
  std::mt19937 rng(1);
  std::vector<int32_t> prompt = RandomPrompt(&rng, 5);
  std::vector<int32_t> greedy = ReferenceGreedy(*ref, prompt, 8);
  EngineOptions o = Options(2);
  o.eos_ids = {greedy[3]};
  PolicyEngine engine(std::move(model), 1, "", o);
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 0;
  r.sampling.max_new_tokens = 8;
  auto res = engine.Generate(r);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->finish_reason, "eos");
  EXPECT_EQ(res->output_ids.back(), greedy[3]);
}

// on_token sees exactly the returned ids and log-probs, in order, for
// requests batched together (greedy, sampled, stopped, eos-ended), and the
// result's version; a request without a callback is unaffected.
TEST(PolicyEngineTest, TokenCallbackSeesExactlyTheResultInOrder) {
  auto model = TinyModel(6);
  const Transformer* ref = model.get();
  std::mt19937 rng(std::random_device{}());
  const std::vector<int32_t> eos_prompt = RandomPrompt(&rng, 7);
  const std::vector<int32_t> greedy = ReferenceGreedy(*ref, eos_prompt, 6);
  EngineOptions o = Options(4);
  o.eos_ids = {greedy[4]};
  PolicyEngine engine(std::move(model), 7, "", o);
  struct Seen {
    std::vector<int32_t> ids;
    std::vector<float> logprobs;
    std::vector<int64_t> versions;
  };
  constexpr int kRequests = 6;
  std::vector<Seen> seen(kRequests);
  std::vector<GenerationRequest> requests(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    GenerationRequest& r = requests[i];
    r.prompt = i == 0 ? eos_prompt : RandomPrompt(&rng, 3 + static_cast<int>(rng() % 20));
    r.sampling.temperature = i % 2 == 0 ? 0.0f : 0.9f;
    r.sampling.max_new_tokens = 5 + static_cast<int>(rng() % 25);
    r.sampling.seed = 1 + rng() % 100000;
    if (i == 3) r.sampling.stop_sequences = {{static_cast<int32_t>(rng() % 101)}};
    if (i == kRequests - 1) continue;  // No callback.
    r.on_token = [&seen, i](int32_t id, float lp, int64_t version) {
      seen[i].ids.push_back(id);
      seen[i].logprobs.push_back(lp);
      seen[i].versions.push_back(version);
    };
  }
  std::vector<std::future<absl::StatusOr<GenerationResult>>> futures;
  for (const GenerationRequest& r : requests) {
    futures.push_back(std::async(std::launch::async, [&engine, r] { return engine.Generate(r); }));
  }
  for (int i = 0; i < kRequests; ++i) {
    absl::StatusOr<GenerationResult> res = futures[i].get();
    ASSERT_TRUE(res.ok()) << res.status();
    ASSERT_FALSE(res->output_ids.empty());
    if (i == 0) {
      EXPECT_EQ(res->finish_reason, "eos");
    }
    if (i == kRequests - 1) {
      EXPECT_TRUE(seen[i].ids.empty());
      continue;
    }
    EXPECT_EQ(seen[i].ids, res->output_ids) << "request " << i;
    EXPECT_EQ(seen[i].logprobs, res->logprobs) << "request " << i;  // Bit-exact: the same floats.
    EXPECT_EQ(seen[i].versions, std::vector<int64_t>(res->output_ids.size(), 7)) << "request " << i;
  }
}

TEST(PolicyEngineTest, WeightSwapUnderLoadDropsNothingAndStampsVersions) {
  auto m1 = TinyModel(10);
  auto m2 = TinyModel(20);
  const Transformer* ref1 = m1.get();
  // Keep a reference copy of model 2 (the engine owns and frees swapped-out models).
  auto ref2 = TinyModel(20);
  PolicyEngine engine(std::move(m1), 1, "v1", Options(3));
  std::mt19937 rng(4);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 12; ++i) prompts.push_back(RandomPrompt(&rng, 4 + i % 5));
  std::vector<std::future<absl::StatusOr<GenerationResult>>> futures;
  for (int i = 0; i < 12; ++i) {
    GenerationRequest r;
    r.prompt = prompts[i];
    r.sampling.temperature = 0;
    r.sampling.max_new_tokens = 16;
    futures.push_back(std::async(std::launch::async, [&engine, r] { return engine.Generate(r); }));
    if (i == 5) engine.SwapWeights(std::move(m2), 2, "v2");
  }
  int v1 = 0, v2 = 0;
  for (int i = 0; i < 12; ++i) {
    auto res = futures[i].get();
    ASSERT_TRUE(res.ok()) << res.status();
    ASSERT_TRUE(res->policy_version == 1 || res->policy_version == 2);
    // Whatever version served it, the tokens are exactly that version's.
    if (res->policy_version == 1) {
      ++v1;
      // ref1 was freed by the swap: compare against a fresh copy of model 1.
      (void)ref1;
      EXPECT_EQ(res->output_ids, ReferenceGreedy(*TinyModel(10), prompts[i], 16)) << i;
    } else {
      ++v2;
      EXPECT_EQ(res->output_ids, ReferenceGreedy(*ref2, prompts[i], 16)) << i;
    }
  }
  EXPECT_EQ(v1 + v2, 12);
  EXPECT_GT(v2, 0);
  EXPECT_EQ(engine.GetInfo().policy_version, 2);
  EXPECT_EQ(engine.GetInfo().checkpoint_path, "v2");
}

}  // namespace
}  // namespace kernelrl::learner
