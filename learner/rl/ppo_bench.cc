// GPU benchmark of the PPO step (policy + critic) and of weight sync, run by
// tools/device_learner_rl.sh. Random-init models of a given shape (made
// here: no weights are downloaded), bf16, activation checkpointing.
//
//   ppo_bench step <tokens> [qwen2-0.5b|small] [trajectories]
//       one PPO update on `trajectories` trajectories totalling `tokens`
//       tokens (half of each are model tokens, in turns, like an agent
//       rollout); JSON line: step time, tokens/s, MFU vs 989 TFLOP/s, peak memory.
//   ppo_bench sync <dir>
//       writes the 0.5B policy as an HF checkpoint (the per-step artifact
//       vLLM/SGLang reload) and hot-swaps it into a PolicyEngine; JSON line.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "learner/checkpoint.h"
#include "learner/policy/engine.h"
#include "learner/rl/trainer.h"

namespace kernelrl::learner::rl {
namespace {

ModelConfig Shape(const std::string& name) {
  ModelConfig c;
  c.model_type = "qwen2";
  c.vocab_size = 151936;
  c.max_position_embeddings = 131072;
  c.rope_theta = 1000000.0;
  c.tie_word_embeddings = true;
  if (name == "small") {  // For 128K tokens on one GPU.
    c.hidden_size = 512, c.intermediate_size = 2048, c.num_layers = 12, c.num_heads = 8, c.num_kv_heads = 2;
    c.head_dim = 64;
  } else {  // Qwen2-0.5B.
    c.hidden_size = 896, c.intermediate_size = 4864, c.num_layers = 24, c.num_heads = 14, c.num_kv_heads = 2;
    c.head_dim = 64;
  }
  return c;
}

std::unique_ptr<Transformer> Make(const ModelConfig& c, Head head, uint64_t seed) {
  ModelOptions o;
  o.device = at::Device(at::kCUDA, 0);
  o.dtype = at::kBFloat16;
  o.trainable = true;
  o.activation_checkpointing = true;
  auto m = Transformer::Create(c, head, o, seed);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*m);
}

// n trajectories of tokens/n tokens: a prompt, then turns of 256 model
// tokens and 256 tool tokens.
std::vector<Sample> Batch(int64_t tokens, int n, int64_t vocab, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<Sample> out;
  for (int i = 0; i < n; ++i) {
    const int64_t T = tokens / n;
    Sample s;
    s.id = std::to_string(i);
    at::Tensor ids = at::randint(vocab, {T}, gen, at::kLong);
    at::Tensor lp = -at::rand({T}, gen) * 4;
    for (int64_t t = 0; t < T; ++t) {
      const bool model = t >= 512 && ((t - 512) / 256) % 2 == 0;
      s.ids.push_back(static_cast<int32_t>(ids[t].item<int64_t>()));
      s.loss_mask.push_back(model);
      s.rollout_logprobs.push_back(model ? lp[t].item<float>() : 0.0f);
    }
    s.reward = static_cast<double>(i % 4) - 1;
    out.push_back(std::move(s));
  }
  return out;
}

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int StepBench(int64_t tokens, const std::string& shape, int n) {
  const ModelConfig c = Shape(shape);
  TrainerOptions o;
  o.max_tokens_per_row = std::max<int64_t>(32768, tokens / n);
  Trainer t(Make(c, Head::kLanguageModel, 1), Make(c, Head::kValue, 2), o);
  std::vector<Sample> batch = Batch(tokens, n, c.vocab_size, 3);
  auto warm = t.PpoStep(batch);  // Warm-up (allocator, cuDNN plans).
  if (!warm.ok()) {
    std::fprintf(stderr, "%s\n", warm.status().ToString().c_str());
    return 1;
  }
  c10::cuda::CUDACachingAllocator::resetPeakStats(0);
  const int iters = 3;
  double flops = 0, sum = 0;
  StepMetrics m;
  for (int i = 0; i < iters; ++i) {
    c10::cuda::device_synchronize();
    const double t0 = Now();
    m = *t.PpoStep(batch);
    c10::cuda::device_synchronize();
    sum += Now() - t0;
    flops = m["train_flops"];
  }
  const double dt = sum / iters;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  const double peak = static_cast<double>(stats.allocated_bytes[0].peak) / (1 << 30);
  std::printf("{\"bench\": \"ppo_step\", \"shape\": \"%s\", \"params\": %ld, \"tokens\": %ld, \"trajectories\": %d, "
              "\"model_tokens\": %.0f, \"step_s\": %.3f, \"tokens_per_s\": %.0f, \"tflops\": %.1f, "
              "\"mfu_vs_989\": %.3f, \"peak_gib\": %.2f, \"policy_loss\": %.4f, \"value_loss\": %.4f}\n",
              shape.c_str(), static_cast<long>(c.ParameterCount()), static_cast<long>(tokens), n, m["model_tokens"],
              dt, tokens / dt, flops / dt / 1e12, flops / dt / 989e12, peak, m["policy_loss"], m["value_loss"]);
  return 0;
}

int SyncBench(const std::string& dir) {
  const ModelConfig c = Shape("qwen2-0.5b");
  auto policy = Make(c, Head::kLanguageModel, 1);
  CheckpointToSave ck;
  ck.policy = policy.get();
  ck.save_rng = false;
  double t0 = Now();
  auto first = SaveCheckpoint(dir, ck);
  if (!first.ok()) return std::fprintf(stderr, "%s\n", first.status().ToString().c_str()), 1;
  const double save_s = Now() - t0;
  auto engine = PolicyEngine::Load(*first + "/policy", "cuda", "bfloat16", 0, {});
  if (!engine.ok()) return std::fprintf(stderr, "%s\n", engine.status().ToString().c_str()), 1;
  ck.step = 1;
  auto second = SaveCheckpoint(dir, ck);
  if (!second.ok()) return 1;
  double swap = 1e9;
  for (int i = 0; i < 3; ++i) {  // Best of three (page cache warm after the first).
    t0 = Now();
    if (auto s = (*engine)->SwapWeightsFrom(*second + "/policy", i + 1); !s.ok()) {
      return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
    }
    GenerationRequest r;
    r.prompt = {1, 2, 3};
    r.sampling.max_new_tokens = 1;
    auto g = (*engine)->Generate(r);  // Served by the new version: the swap is done.
    swap = std::min(swap, Now() - t0);
    if (!g.ok() || g->policy_version != i + 1) return std::fprintf(stderr, "swap not visible\n"), 1;
  }
  std::printf("{\"bench\": \"weight_sync\", \"params\": %ld, \"save_checkpoint_s\": %.3f, \"hot_swap_s\": %.3f, "
              "\"goal_s\": 0.5}\n",
              static_cast<long>(c.ParameterCount()), save_s, swap);
  return 0;
}

}  // namespace
}  // namespace kernelrl::learner::rl

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "step" && argc > 2) {
    return kernelrl::learner::rl::StepBench(std::atoll(argv[2]), argc > 3 ? argv[3] : "qwen2-0.5b",
                                            argc > 4 ? std::atoi(argv[4]) : 1);
  }
  if (mode == "sync" && argc > 2) return kernelrl::learner::rl::SyncBench(argv[2]);
  std::fprintf(stderr, "usage: ppo_bench step <tokens> [qwen2-0.5b|small] [trajectories] | sync <dir>\n");
  return 2;
}
