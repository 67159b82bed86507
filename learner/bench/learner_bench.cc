// Learner benchmarks on the GPU, each printed as one JSON line; the HF
// baseline (hf_bench.py) prints the same lines for the same configs, and
// tools/device_learner.sh runs both and prints the ratios.
//
//   learner_bench train  SEQ [--ckpt] [--unfused]
//                                      fwd+bwd tokens/s, Qwen2-0.5B shape, bf16
//                                      (--unfused: eager ATen instead of the
//                                      fused kernels, for the A/B ratio)
//   learner_bench memory SEQ [--ckpt] [--unfused]
//                                      peak GPU memory of one fwd+bwd step
//   learner_bench decode B P N         policy engine: B requests, P-token
//                                      prompts, N new tokens (greedy, no EOS)
//   learner_bench profile SEQ          GPU time per kernel name over 2 train
//                                      steps (Kineto), top kernels as JSON
//   learner_bench varlen STEPS
//                                      fwd+bwd of a packed row of 8 sequences of
//                                      fresh random lengths (1,000-4,000 tokens,
//                                      a PPO batch's trajectories), STEPS times,
//                                      then the same lengths again: ms a step on
//                                      new lengths and on lengths seen before
// --sdpa_cudnn (train, memory, profile, varlen): torch's own attention choice,
// cuDNN's on Hopper, where models turn it off by default (AllowCudnnAttention), for the A/B.
// Inputs are fresh random ids; weights random (init as transformers).
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <algorithm>
#include <map>
#include <numeric>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <vector>

#include "learner/bench/kernel_profile.h"
#include "learner/bench/shapes.h"
#include "learner/model.h"
#include "learner/policy/engine.h"

namespace kernelrl::learner {
namespace {

ModelConfig Qwen2_0_5B() { return bench::Shape("qwen2.5-0.5b"); }

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Model FLOPs of one fwd+bwd over T tokens (causal attention counted half),
// the same formula hf_bench.py uses.
double TrainFlops(const ModelConfig& c, int64_t T) {
  const double n = static_cast<double>(c.ParameterCount() - c.vocab_size * c.hidden_size);  // non-embedding
  const double head = static_cast<double>(c.vocab_size) * c.hidden_size;                  // lm_head matmul
  const double attn = 2.0 * 2.0 * c.num_layers * c.num_heads * c.head_dim * static_cast<double>(T) * T / 2.0;
  return 3.0 * (2.0 * (n + head) * T + attn);
}

bool g_fused = true;         // --unfused clears it.
bool g_sdpa_cudnn = false;   // --sdpa_cudnn sets it.

std::unique_ptr<Transformer> Make(bool trainable, bool ckpt) {
  ModelOptions o;
  o.fused_kernels = g_fused;
  o.device = at::Device(at::kCUDA, 0);
  o.dtype = at::kBFloat16;
  o.trainable = trainable;
  o.activation_checkpointing = ckpt;
  AllowCudnnAttention(g_sdpa_cudnn);
  auto m = Transformer::Create(Qwen2_0_5B(), Head::kLanguageModel, o, 0);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*m);
}

// One step: mean next-token cross-entropy over the sequence (a packed row of
// `lengths` when given), backward.
void Step(Transformer& m, int64_t T, const std::vector<int64_t>& lengths = {}) {
  at::Tensor ids = at::randint(0, m.config().vocab_size, {1, T + 1}, at::TensorOptions().dtype(at::kLong).device(at::kCUDA));
  at::Tensor h = m.Hidden(ids.narrow(1, 0, T), lengths);
  at::Tensor loss = -m.TokenLogprobs(h, ids.narrow(1, 1, T)).mean();
  loss.backward();
}

int Train(int64_t T, bool ckpt) {
  auto m = Make(true, ckpt);
  for (int i = 0; i < 3; ++i) Step(*m, T);
  c10::cuda::device_synchronize();
  const int iters = 10;
  double t0 = Now();
  for (int i = 0; i < iters; ++i) Step(*m, T);
  c10::cuda::device_synchronize();
  double dt = (Now() - t0) / iters;
  double tps = T / dt;
  double tflops = TrainFlops(m->config(), T) / dt / 1e12;
  std::printf("{\"impl\": \"kernelrl\", \"bench\": \"train\", \"seq\": %ld, \"ckpt\": %s, \"fused\": %s, "
              "\"sdpa_cudnn\": %s, \"tokens_per_s\": %.1f, \"step_ms\": %.2f, \"tflops\": %.1f, \"mfu_vs_989\": %.3f}\n",
              static_cast<long>(T), ckpt ? "true" : "false", g_fused ? "true" : "false", g_sdpa_cudnn ? "true" : "false",
              tps, dt * 1e3, tflops, tflops / 989.0);
  return 0;
}

// Where the step's GPU time goes (bench::PrintKernelProfile over two steps).
int Profile(int64_t T) {
  auto m = Make(true, false);
  for (int i = 0; i < 3; ++i) Step(*m, T);
  bench::PrintKernelProfile([&] { Step(*m, T); }, 2,
                            "\"impl\": \"kernelrl\", \"bench\": \"profile\", \"seq\": " + std::to_string(T));
  return 0;
}

// A step's cost on lengths it has not seen, against the same lengths again: what an attention
// backend that builds per shape costs a learner whose every trajectory has a length of its own.
int VarLen(int steps) {
  auto m = Make(true, false);
  std::vector<std::vector<int64_t>> rows(steps);
  for (auto& r : rows) {
    for (int i = 0; i < 8; ++i) r.push_back(1000 + static_cast<int64_t>(std::rand() % 3001));
  }
  auto step = [&](const std::vector<int64_t>& lengths) {
    Step(*m, std::accumulate(lengths.begin(), lengths.end(), int64_t{0}), lengths);
  };
  step({777, 1333});  // CUDA context, allocator and kernels loaded; two lengths no row has.
  c10::cuda::device_synchronize();
  double ms[2];
  for (int pass = 0; pass < 2; ++pass) {
    const double t0 = Now();
    for (const auto& r : rows) step(r);
    c10::cuda::device_synchronize();
    ms[pass] = (Now() - t0) / steps * 1e3;
  }
  std::printf("{\"impl\": \"kernelrl\", \"bench\": \"varlen\", \"sdpa_cudnn\": %s, \"steps\": %d, "
              "\"fused\": %s, \"new_lengths_step_ms\": %.2f, \"seen_lengths_step_ms\": %.2f}\n",
              g_sdpa_cudnn ? "true" : "false", steps, g_fused ? "true" : "false", ms[0], ms[1]);
  return 0;
}

int Memory(int64_t T, bool ckpt) {
  auto m = Make(true, ckpt);
  c10::cuda::device_synchronize();
  c10::cuda::CUDACachingAllocator::resetPeakStats(0);
  double t0 = Now();
  try {
    Step(*m, T);
    c10::cuda::device_synchronize();
  } catch (const std::exception& e) {
    const bool oom = std::string(e.what()).find("out of memory") != std::string::npos;
    std::printf("{\"impl\": \"kernelrl\", \"bench\": \"memory\", \"seq\": %ld, \"ckpt\": %s, \"error\": \"%s\"}\n",
                static_cast<long>(T), ckpt ? "true" : "false", oom ? "OOM" : "exception (see stderr)");
    std::fprintf(stderr, "memory bench: %s\n", e.what());
    return oom ? 0 : 1;
  }
  double dt = Now() - t0;
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  const double peak = stats.allocated_bytes[0].peak / double(1 << 30);
  std::printf("{\"impl\": \"kernelrl\", \"bench\": \"memory\", \"seq\": %ld, \"ckpt\": %s, \"fused\": %s, "
              "\"peak_gib\": %.2f, \"step_s\": %.3f}\n",
              static_cast<long>(T), ckpt ? "true" : "false", g_fused ? "true" : "false", peak, dt);
  return 0;
}

int Decode(int batch, int prompt_len, int new_tokens) {
  auto model = Make(false, false);
  EngineOptions o;
  o.max_batch = batch;
  o.max_seq_len = prompt_len + new_tokens + 8;
  PolicyEngine engine(std::move(model), 1, "random", o);
  auto run = [&](int n_new) {
    std::vector<std::future<absl::StatusOr<GenerationResult>>> fs;
    at::Tensor prompts = at::randint(0, 151936, {batch, prompt_len}, at::kLong);
    for (int b = 0; b < batch; ++b) {
      GenerationRequest r;
      for (int i = 0; i < prompt_len; ++i) r.prompt.push_back(static_cast<int32_t>(prompts[b][i].item<int64_t>()));
      r.sampling.temperature = 0;
      r.sampling.max_new_tokens = n_new;
      fs.push_back(std::async(std::launch::async, [&engine, r] { return engine.Generate(r); }));
    }
    int64_t total = 0;
    for (auto& f : fs) {
      auto res = f.get();
      if (!res.ok()) {
        std::fprintf(stderr, "%s\n", res.status().ToString().c_str());
        std::exit(1);
      }
      total += static_cast<int64_t>(res->output_ids.size());
    }
    return total;
  };
  run(8);  // Warm-up.
  double t0 = Now();
  int64_t tokens = run(new_tokens);
  double dt = Now() - t0;
  std::printf("{\"impl\": \"kernelrl\", \"bench\": \"decode\", \"batch\": %d, \"prompt\": %d, \"new\": %d, "
              "\"tokens\": %ld, \"seconds\": %.3f, \"tokens_per_s\": %.1f}\n",
              batch, prompt_len, new_tokens, static_cast<long>(tokens), dt, tokens / dt);
  return 0;
}

}  // namespace
}  // namespace kernelrl::learner

int main(int argc, char** argv) {
  using namespace kernelrl::learner;
  if (argc < 2) {
    std::fprintf(stderr, "usage: learner_bench train|memory SEQ [--ckpt] [--unfused] | profile SEQ [--unfused] | varlen STEPS "
                 "| decode B P N  (train, memory, profile, varlen: [--sdpa_cudnn])\n");
    return 2;
  }
  const std::string mode = argv[1];
  bool ckpt = false;
  for (int i = 3; i < argc; ++i) {
    ckpt |= std::string(argv[i]) == "--ckpt";
    g_sdpa_cudnn |= std::string(argv[i]) == "--sdpa_cudnn";
    if (std::string(argv[i]) == "--unfused") g_fused = false;
  }
  try {
    if (mode == "train" && argc >= 3) return Train(std::atol(argv[2]), ckpt);
    if (mode == "profile" && argc >= 3) return Profile(std::atol(argv[2]));
    if (mode == "memory" && argc >= 3) return Memory(std::atol(argv[2]), ckpt);
    if (mode == "varlen" && argc >= 3) return VarLen(std::atoi(argv[2]));
    if (mode == "decode" && argc >= 5) return Decode(std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "learner_bench %s failed: %s\n", mode.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "bad arguments\n");
  return 2;
}
