// The policy engine on CPU with a tiny random model: batched/continuous
// generation equals one-at-a-time greedy decoding, logprobs equal a full
// forward pass, seeds reproduce, top-p/stop/eos/max-tokens/context limits,
// a weight swap mid-traffic drops nothing and stamps versions right, a tiny
// KV budget preempts and recomputes without losing a request (log-probs
// still the trainer's), and the prefix cache makes a second turn prefill
// only its new tokens and rollouts of one prompt share its blocks.
#include "learner/policy/engine.h"

#include <c10/core/GradMode.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <random>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/gpu_lease.h"
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

// A sampled request for a random prompt.
GenerationRequest Sampled(std::mt19937* rng, int prompt_len, float temperature, int32_t max_new, uint64_t seed) {
  GenerationRequest r;
  r.prompt = RandomPrompt(rng, prompt_len);
  r.sampling.temperature = temperature;
  r.sampling.max_new_tokens = max_new;
  r.sampling.seed = seed;
  return r;
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

// Weights from memory (the job's publish between full checkpoints): the
// engine serves a copy — the trainer's later in-place updates do not reach
// it — stamped with the version; LoRA adapters arrive merged.
TEST(PolicyEngineTest, SwapFromModelServesACopyOfTheTrainersWeights) {
  PolicyEngine engine(TinyModel(1), 1, "v1", Options(2));
  auto trainer_side = TinyModel(2);
  std::mt19937 rng(5);
  const std::vector<int32_t> prompt = RandomPrompt(&rng, 6);
  const std::vector<int32_t> want = ReferenceGreedy(*trainer_side, prompt, 10);
  ASSERT_TRUE(engine.SwapWeightsFromModel(*trainer_side, 2).ok());
  {
    c10::AutoGradMode no_grad(false);
    for (at::Tensor& p : trainer_side->parameters()) p.mul_(-1.0);  // The optimizer steps on.
  }
  ASSERT_NE(ReferenceGreedy(*trainer_side, prompt, 10), want);
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 0;
  r.sampling.max_new_tokens = 10;
  auto res = engine.Generate(r);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->policy_version, 2);
  EXPECT_EQ(res->output_ids, want);
  EXPECT_EQ(engine.GetInfo().checkpoint_path, "memory:version-2");

  ModelOptions lora;
  lora.lora_rank = 4;
  auto adapted = Transformer::Create(TinyConfig(), Head::kLanguageModel, lora, 3);
  ASSERT_TRUE(adapted.ok());
  {
    c10::AutoGradMode no_grad(false);
    for (const Transformer::Layer& l : (*adapted)->layers()) l.gate_up_lora_b.uniform_(-0.5, 0.5);
  }
  ASSERT_TRUE(engine.SwapWeightsFromModel(**adapted, 3).ok());
  auto merged = (*adapted)->MergedCopy(ModelOptions{});
  ASSERT_TRUE(merged.ok());
  EXPECT_FALSE((*merged)->has_adapters());
  r.sampling.max_new_tokens = 6;
  res = engine.Generate(r);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->policy_version, 3);
  EXPECT_EQ(res->output_ids, ReferenceGreedy(**adapted, prompt, 6));
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

// The fixed-shape decode step (cuda_graphs: captured on a GPU, uncaptured
// here) through the whole engine: batch sizes 1..4 padded to their buckets.
TEST(PolicyEngineTest, FixedShapeDecodeEqualsReferenceDecoding) {
  auto model = TinyModel(12);
  const Transformer* ref = model.get();
  EngineOptions o = Options(4);
  o.block_size = 4;
  o.cuda_graphs = true;
  PolicyEngine engine(std::move(model), 1, "", o);
  std::mt19937 rng(std::random_device{}());
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::future<absl::StatusOr<GenerationResult>>> futures;
  for (int i = 0; i < 7; ++i) {
    prompts.push_back(RandomPrompt(&rng, 2 + 3 * i));
    GenerationRequest r;
    r.prompt = prompts[i];
    r.sampling.temperature = 0;
    r.sampling.max_new_tokens = 6 + 2 * i;
    futures.push_back(std::async(std::launch::async, [&engine, r] { return engine.Generate(r); }));
  }
  for (int i = 0; i < 7; ++i) {
    auto res = futures[i].get();
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->output_ids, ReferenceGreedy(*ref, prompts[i], 6 + 2 * i)) << "request " << i;
  }
  EXPECT_EQ(engine.GetInfo().decode_graphs, 0);  // Nothing is captured on a CPU.
}

// Draws are keyed by their context, not their position: a request whose prompt runs three tokens
// further into another's output, with the same seed, draws what that one drew from there on. At a
// temperature where every token is about as likely as any other, the same number picks the same
// token whatever the logits, so the tokens show the draws. Over many draws every token comes up
// about equally often: the keyed numbers pass for uniform.
TEST(PolicyEngineTest, DrawsAreKeyedByContextNotPosition) {
  PolicyEngine engine(TinyModel(4), 1, "", Options(4));
  std::mt19937 rng(11);
  const GenerationRequest a = Sampled(&rng, 7, 1e6f, 16, 4242);
  auto first = engine.Generate(a);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->output_ids.size(), 16u);
  GenerationRequest b = a;
  b.prompt.insert(b.prompt.end(), first->output_ids.begin(), first->output_ids.begin() + 3);
  b.sampling.max_new_tokens = 10;
  auto later = engine.Generate(b);
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ(later->output_ids, std::vector<int32_t>(first->output_ids.begin() + 3, first->output_ids.begin() + 13));
  b.sampling.seed = 4243;
  auto other = engine.Generate(b);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(other->output_ids, later->output_ids);

  std::vector<int> count(101, 0);
  for (int i = 0; i < 100; ++i) {
    const GenerationRequest r = Sampled(&rng, 5, 1e6f, 64, 1 + rng() % 1000000);
    auto out = engine.Generate(r);
    ASSERT_TRUE(out.ok()) << out.status();
    for (int32_t t : out->output_ids) ++count[t];
  }
  // 6,400 draws over 101 tokens: ~63 each, a standard deviation of ~8.
  EXPECT_GT(*std::min_element(count.begin(), count.end()), 30);
  EXPECT_LT(*std::max_element(count.begin(), count.end()), 100);
}

TEST(PolicyEngineTest, SampledLogprobsMatchFullForwardAndSeedsReproduce) {
  auto model = TinyModel(2);
  const Transformer* ref = model.get();
  PolicyEngine engine(std::move(model), 1, "", Options(3));
  std::mt19937 rng(5);
  GenerationRequest r = Sampled(&rng, 9, 0.8f, 20, 1234);
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

// A sandbox worker timing on the engine's GPU holds the lease exclusively:
// no step runs until it lets go, then the request completes as usual.
TEST(PolicyEngineTest, StepsWaitWhileATimerHoldsTheGpuLease) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const GpuLease lease(std::string(tmp != nullptr ? tmp : "/tmp") + "/engine-gpu.lease");
  absl::StatusOr<GpuLease::Hold> timer = lease.Exclusive();
  ASSERT_TRUE(timer.ok()) << timer.status();
  EngineOptions o = Options(2);
  o.gpu_lease_path = lease.path();
  PolicyEngine engine(TinyModel(5), 1, "", o);
  std::mt19937 rng(3);
  GenerationRequest r;
  r.prompt = RandomPrompt(&rng, 6);
  r.sampling.temperature = 0;
  r.sampling.max_new_tokens = 4;
  std::atomic<int> tokens{0};
  r.on_token = [&tokens](int32_t, float, int64_t) { ++tokens; };
  auto f = std::async(std::launch::async, [&engine, r] { return engine.Generate(r); });
  EXPECT_EQ(f.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  EXPECT_EQ(tokens.load(), 0);
  timer->Release();
  auto res = f.get();
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->output_ids.size(), 4u);
  EXPECT_EQ(tokens.load(), 4);
  EXPECT_GT(engine.GetInfo().gpu_lease_wait_s, 0.0);  // at least the 300 ms above
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


// Holds the engine thread inside request 0's first token until `queued`
// more requests wait in the queue, so the engine takes them all in one
// iteration: admission, sharing and preemption then do not depend on how
// fast the test's threads start.
class Gate {
 public:
  Gate(PolicyEngine* engine, int queued) : engine_(engine), queued_(queued) {}
  // The blocking request (its prompt differs from the others').
  std::future<absl::StatusOr<GenerationResult>> Hold(std::vector<int32_t> prompt) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.sampling.temperature = 0;
    r.sampling.max_new_tokens = 2;
    r.on_token = [this](int32_t, float, int64_t) {
      if (!first_.exchange(true)) open_.WaitForNotification();
    };
    auto f = std::async(std::launch::async, [this, r] { return engine_->Generate(r); });
    EXPECT_TRUE(::kernelrl::testing::WaitFor([this] { return first_.load(); }, absl::Seconds(120)));
    return f;
  }
  void OpenWhenQueued() {
    EXPECT_TRUE(::kernelrl::testing::WaitFor([this] { return engine_->GetInfo().queued >= queued_; },
                                             absl::Seconds(120)));
    open_.Notify();
  }

 private:
  PolicyEngine* engine_;
  const int queued_;
  std::atomic<bool> first_{false};
  absl::Notification open_;
};

// The trainer's log-prob of each output token (Transformer::TokenLogprobs,
// as learner/rl/trainer.cc computes it for the PPO ratio).
std::vector<float> TrainerLogprobs(const Transformer& m, const std::vector<int32_t>& prompt,
                                   const std::vector<int32_t>& output, double temperature) {
  c10::AutoGradMode no_grad(false);
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  seq.insert(seq.end(), output.begin(), output.end());
  const int64_t n = static_cast<int64_t>(seq.size());
  at::Tensor ids = at::tensor(seq, at::kLong).view({1, n});
  std::vector<int64_t> targets(n, -1);
  for (size_t i = 0; i < output.size(); ++i) targets[prompt.size() - 1 + i] = output[i];
  at::Tensor lp = m.TokenLogprobs(m.Hidden(ids)[0], at::tensor(targets, at::kLong), temperature);
  std::vector<float> out;
  for (size_t i = 0; i < output.size(); ++i) out.push_back(lp[prompt.size() - 1 + i].item<float>());
  return out;
}

TEST(PolicyEngineTest, TinyKVBudgetPreemptsAndRecomputesWithoutLosingRequests) {
  auto model = TinyModel(31);
  const Transformer* ref = model.get();
  EngineOptions o = Options(8);
  o.block_size = 4;
  o.kv_blocks = 12;  // 48 positions for 8 requests of up to 34 tokens each.
  PolicyEngine engine(std::move(model), 3, "", o);
  std::mt19937 rng(std::random_device{}());
  Gate gate(&engine, 8);
  auto held = gate.Hold(RandomPrompt(&rng, 5));
  std::vector<GenerationRequest> requests;
  std::vector<std::future<absl::StatusOr<GenerationResult>>> futures;
  for (int i = 0; i < 8; ++i) {
    GenerationRequest r;
    r.prompt = RandomPrompt(&rng, 4 + i);
    r.sampling.temperature = i % 2 ? 0.7f : 1.0f;
    r.sampling.top_p = i % 3 == 0 ? 0.9f : 1.0f;
    r.sampling.max_new_tokens = 20 + i;
    r.sampling.seed = 100 + i;
    requests.push_back(r);
    futures.push_back(std::async(std::launch::async, [&engine, r] { return engine.Generate(r); }));
  }
  gate.OpenWhenQueued();
  ASSERT_TRUE(held.get().ok());
  for (int i = 0; i < 8; ++i) {
    auto res = futures[i].get();
    ASSERT_TRUE(res.ok()) << "request " << i << ": " << res.status();
    EXPECT_EQ(res->finish_reason, "max_new_tokens") << i;
    ASSERT_EQ(res->output_ids.size(), static_cast<size_t>(20 + i)) << i;
    EXPECT_EQ(res->policy_version, 3);
    std::vector<float> want = TrainerLogprobs(*ref, requests[i].prompt, res->output_ids,
                                              requests[i].sampling.temperature);
    for (size_t t = 0; t < want.size(); ++t) {
      EXPECT_NEAR(res->logprobs[t], want[t], 1e-4) << "request " << i << " token " << t;
    }
  }
  PolicyEngine::Info info = engine.GetInfo();
  EXPECT_GT(info.preemptions, 0);
  EXPECT_EQ(info.requests_completed, 9);
  EXPECT_EQ(info.active, 0);
  EXPECT_EQ(info.kv_blocks_total, 12);
  EXPECT_EQ(info.kv_blocks_used, 0);
  // Recomputation prefilled more tokens than the prompts hold.
  int64_t prompts = 5;
  for (const auto& r : requests) prompts += static_cast<int64_t>(r.prompt.size());
  EXPECT_GT(info.prompt_tokens, prompts);
}

TEST(PolicyEngineTest, PromptLargerThanTheKVCacheFails) {
  EngineOptions o = Options(2);
  o.block_size = 4;
  o.kv_blocks = 3;
  PolicyEngine engine(TinyModel(2), 1, "", o);
  std::mt19937 rng(std::random_device{}());
  GenerationRequest r;
  r.prompt = RandomPrompt(&rng, 12);  // 12 + 1 positions > 12.
  EXPECT_EQ(engine.Generate(r).status().code(), absl::StatusCode::kResourceExhausted);
  r.prompt.resize(11);
  r.sampling.temperature = 0;
  r.sampling.max_new_tokens = 5;
  auto res = engine.Generate(r);  // Fits, then fills the cache: its context.
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->finish_reason, "context_length");
  EXPECT_EQ(res->output_ids.size(), 2u);
}

TEST(PolicyEngineTest, SecondTurnPrefillsOnlyItsNewTokens) {
  auto model = TinyModel(41);
  const Transformer* ref = model.get();
  EngineOptions o = Options(4);
  o.block_size = 4;
  PolicyEngine engine(std::move(model), 1, "", o);
  std::mt19937 rng(std::random_device{}());
  // Turn 1: a 23-token prompt, 10 tokens out.
  GenerationRequest r;
  r.prompt = RandomPrompt(&rng, 23);
  r.sampling.temperature = 0;
  r.sampling.max_new_tokens = 10;
  auto t1 = engine.Generate(r);
  ASSERT_TRUE(t1.ok());
  const PolicyEngine::Info before = engine.GetInfo();
  EXPECT_EQ(before.prefill_tokens, 23);
  EXPECT_EQ(before.prefix_hit_tokens, 0);
  // Turn 2: the whole history plus 7 new tokens (a tool result).
  GenerationRequest r2 = r;
  r2.prompt.insert(r2.prompt.end(), t1->output_ids.begin(), t1->output_ids.end());
  for (int32_t t : RandomPrompt(&rng, 7)) r2.prompt.push_back(t);
  auto t2 = engine.Generate(r2);
  ASSERT_TRUE(t2.ok());
  const PolicyEngine::Info after = engine.GetInfo();
  // Turn 1 left its keys/values for positions [0, 32) (the last output token
  // was never fed back): 8 full blocks of 4. Turn 2 (40 tokens) prefills
  // the 8 after them: its 7 new tokens and turn 1's last output token.
  EXPECT_EQ(after.prefix_hit_tokens - before.prefix_hit_tokens, 32);
  EXPECT_EQ(after.prefill_tokens - before.prefill_tokens, 8);
  EXPECT_EQ(t2->output_ids, ReferenceGreedy(*ref, r2.prompt, 10));
  EXPECT_GT(after.kv_blocks_cached, 0);
}

TEST(PolicyEngineTest, RolloutsOfOnePromptShareItsBlocks) {
  auto model = TinyModel(51);
  const Transformer* ref = model.get();
  EngineOptions o = Options(8);
  o.block_size = 4;
  PolicyEngine engine(std::move(model), 1, "", o);
  std::mt19937 rng(std::random_device{}());
  const std::vector<int32_t> prompt = RandomPrompt(&rng, 18);  // 4 full blocks + 2.
  Gate gate(&engine, 4);
  auto held = gate.Hold(RandomPrompt(&rng, 3));
  std::vector<std::future<absl::StatusOr<GenerationResult>>> futures;
  for (int i = 0; i < 4; ++i) {
    GenerationRequest r;
    r.prompt = prompt;
    r.sampling.temperature = 0.9f;
    r.sampling.max_new_tokens = 6;
    r.sampling.seed = 7 + i;
    futures.push_back(std::async(std::launch::async, [&engine, r] { return engine.Generate(r); }));
  }
  gate.OpenWhenQueued();
  ASSERT_TRUE(held.get().ok());
  for (auto& f : futures) {
    auto res = f.get();
    ASSERT_TRUE(res.ok()) << res.status();
    std::vector<float> want = TrainerLogprobs(*ref, prompt, res->output_ids, 0.9);
    for (size_t t = 0; t < want.size(); ++t) EXPECT_NEAR(res->logprobs[t], want[t], 1e-4) << t;
  }
  // One rollout computes the prompt; the other three reuse its 4 full
  // blocks and compute only the last 2 tokens (3: the gate's prompt).
  const PolicyEngine::Info info = engine.GetInfo();
  EXPECT_EQ(info.prefill_tokens, 3 + 18 + 3 * 2);
  EXPECT_EQ(info.prefix_hit_tokens, 3 * 16);
}

}  // namespace
}  // namespace kernelrl::learner
