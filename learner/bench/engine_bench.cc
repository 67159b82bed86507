// The policy engine on one GPU, each figure one JSON line (hf_bench.py
// prints the HF generate() lines beside them; tools/device_engine.sh runs
// both and prints the ratios).
//
//   engine_bench decode SHAPE B1,B2,... P N eager|graphs
//       B requests of P random tokens, N new tokens each (greedy, no EOS),
//       all submitted at once: tokens generated / wall, per batch size (the
//       median of 5 runs, with the slowest and fastest); decode steps eager
//       or replayed from CUDA graphs.
//   engine_bench agentic SHAPE R TURNS on|off   (CUDA-graph decode)
//       R rollouts of one task at once, each TURNS turns: turn t's prompt is
//       the whole history (a 512-token system+task prompt, then per earlier
//       turn 64 generated and 128 "tool result" tokens); prefix caching on
//       or off: prompt tokens admitted, tokens prefilled, prefix hits, wall.
//   engine_bench step SHAPE B:CTX,B:CTX,... [--profile]
//       one decode step of the model alone (no engine): B sequences with
//       CTX keys each in shuffled cache blocks, replayed from a CUDA graph,
//       ms per step with the paged decode kernel and with the eager ATen
//       path (blocks gathered into scratch, then bmm + softmax), same cache;
//       --profile: then the kernel step's GPU time per kernel (Kineto).
//   engine_bench agentic SHAPE R TURNS on|off TASK OUT TOOL
//       the same with a TASK-token prompt, OUT generated and TOOL tool tokens a
//       turn (the code model's rollouts: ~1,500, ~270 and ~200).
// SHAPE: 0.5b (Qwen2.5-0.5B), 7b (Qwen2.5-7B) or codemodel (docs/CODEMODEL.md's
// 4.2M model). Weights random (normal 0.02, made on the GPU), bf16. SHAPE tiny
// (2 layers, hidden 64) and any SHAPE-cpu run on the CPU in fp32, eager
// decode: tiny is a smoke run of the benchmark's own code where no GPU is;
// codemodel-cpu is a policy server on the CPU (kernelrl learn --policy_device=cpu).
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/core/InferenceMode.h>
#include <c10/cuda/CUDAFunctions.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "learner/bench/kernel_profile.h"
#include "learner/bench/shapes.h"
#include "learner/model.h"
#include "learner/policy/decode_graphs.h"
#include "learner/policy/engine.h"

namespace kernelrl::learner {
namespace {

// On the CPU in fp32: "tiny" and any "<shape>-cpu".
bool OnCpu(const std::string& shape) { return shape == "tiny" || absl::EndsWith(shape, "-cpu"); }

// "tiny", "codemodel", "7b" or "0.5b" (and their "-cpu"): learner/bench/shapes.h.
ModelConfig Shape(std::string name) {
  if (absl::EndsWith(name, "-cpu")) name.resize(name.size() - 4);
  return bench::Shape(name == "tiny" || name == "codemodel" ? name : "qwen2.5-" + name);
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Random weights drawn on the GPU (a 7B drawn on the CPU takes minutes), or on the CPU in fp32.
std::unique_ptr<Transformer> MakeModel(const ModelConfig& c, bool on_cpu) {
  c10::InferenceMode inference;
  ModelOptions o;
  if (!on_cpu) {
    o.device = at::Device(at::kCUDA, 0);
    o.dtype = at::kBFloat16;
  }
  auto opts = at::TensorOptions().device(o.device).dtype(o.dtype);
  auto normal = [&](std::vector<int64_t> shape) { return at::randn(shape, opts) * 0.02; };
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim, i = c.intermediate_size;
  RootWeights root;
  root.embed = normal({c.vocab_size, c.hidden_size});
  root.final_norm = at::ones({c.hidden_size}, opts);
  if (!c.tie_word_embeddings) root.lm_head = normal({c.vocab_size, c.hidden_size});
  std::vector<at::Tensor> fields;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    // input_norm, qkv_w, qkv_b, o_w, o_b, post_norm, gate_up_w, gate_up_b, down_w, down_b
    fields.push_back(at::ones({c.hidden_size}, opts));
    fields.push_back(normal({q + 2 * kv, c.hidden_size}));
    fields.push_back(at::zeros({q + 2 * kv}, opts));
    fields.push_back(normal({c.hidden_size, q}));
    fields.push_back(at::Tensor());
    fields.push_back(at::ones({c.hidden_size}, opts));
    fields.push_back(normal({2 * i, c.hidden_size}));
    fields.push_back(at::Tensor());
    fields.push_back(normal({c.hidden_size, i}));
    fields.push_back(at::Tensor());
  }
  auto m = Transformer::FromWeights(c, Head::kLanguageModel, o, std::move(root), std::move(fields));
  if (!m.ok()) {
    std::fprintf(stderr, "model: %s\n", m.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*m);
}

std::vector<int32_t> RandomTokens(std::mt19937* rng, int n, int vocab) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = std::uniform_int_distribution<int>(0, vocab - 1)(*rng);
  return t;
}

// Runs the requests concurrently; returns the results in order.
std::vector<GenerationResult> RunAll(PolicyEngine* engine, const std::vector<GenerationRequest>& requests) {
  std::vector<std::future<absl::StatusOr<GenerationResult>>> fs;
  for (const auto& r : requests) {
    fs.push_back(std::async(std::launch::async, [engine, r] { return engine->Generate(r); }));
  }
  std::vector<GenerationResult> out;
  for (auto& f : fs) {
    auto res = f.get();
    if (!res.ok()) {
      std::fprintf(stderr, "generate: %s\n", res.status().ToString().c_str());
      std::exit(1);
    }
    out.push_back(std::move(*res));
  }
  return out;
}

void Sync() {
  if (at::hasCUDA()) c10::cuda::device_synchronize();
}

double PeakGiB() {
  if (!at::hasCUDA()) return 0;
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  return stats.allocated_bytes[0].peak / double(1 << 30);
}

int Decode(const std::string& shape, const std::vector<int>& batches, int prompt_len, int new_tokens,
           bool graphs) {
  const ModelConfig c = Shape(shape);
  int max_b = 0;
  for (int b : batches) max_b = std::max(max_b, b);
  EngineOptions o;
  o.max_batch = max_b;
  o.max_seq_len = prompt_len + new_tokens + 8;
  o.eos_ids = {-1};  // No EOS: every request runs to N tokens, like HF's min_new_tokens.
  o.cuda_graphs = graphs && !OnCpu(shape);
  PolicyEngine engine(MakeModel(c, OnCpu(shape)), 1, "random", o);
  std::mt19937 rng(std::random_device{}());
  auto requests = [&](int batch, int n_new) {
    std::vector<GenerationRequest> rs(batch);
    for (auto& r : rs) {
      r.prompt = RandomTokens(&rng, prompt_len, static_cast<int>(c.vocab_size));
      r.sampling.temperature = 0;
      r.sampling.max_new_tokens = n_new;
    }
    return rs;
  };
  // Warm-up: allocator, kernels, and the graphs of every batch bucket.
  for (int batch : batches) RunAll(&engine, requests(batch, 8));
  // Each batch size runs kReps times on fresh prompts (a 0.5B run is half a
  // second: one run moves with the host's scheduling); the median counts.
  constexpr int kReps = 5;
  for (int batch : batches) {
    std::vector<double> rates;
    int64_t tokens = 0;
    double seconds = 0;
    for (int rep = 0; rep < kReps; ++rep) {
      auto rs = requests(batch, new_tokens);
      Sync();
      const double t0 = Now();
      auto results = RunAll(&engine, rs);
      const double dt = Now() - t0;
      tokens = 0;
      for (const auto& r : results) tokens += static_cast<int64_t>(r.output_ids.size());
      rates.push_back(tokens / dt);
      seconds += dt;
    }
    std::sort(rates.begin(), rates.end());
    std::printf("{\"impl\": \"kernelrl\", \"bench\": \"decode\", \"shape\": \"%s\", \"graphs\": %s, "
                "\"graphs_captured\": %d, \"batch\": %d, \"prompt\": %d, \"new\": %d, \"tokens\": %ld, "
                "\"runs\": %d, \"seconds\": %.3f, \"tokens_per_s\": %.1f, \"tokens_per_s_min\": %.1f, "
                "\"tokens_per_s_max\": %.1f, \"peak_gib\": %.2f}\n",
                shape.c_str(), graphs ? "true" : "false", engine.GetInfo().decode_graphs, batch, prompt_len,
                new_tokens, static_cast<long>(tokens), kReps, seconds / kReps, rates[kReps / 2], rates.front(),
                rates.back(), PeakGiB());
    std::fflush(stdout);
  }
  return 0;
}

// ms per decode step (CUDA-graph replay, B sequences of ctx keys) with our
// kernels on and off.
int Step(const std::string& shape, const std::vector<std::pair<int, int>>& points, bool profile) {
  constexpr int64_t kBlock = 16;
  const ModelConfig c = Shape(shape);
  std::unique_ptr<Transformer> model = MakeModel(c, OnCpu(shape));
  const at::TensorOptions opts = at::TensorOptions().device(model->options().device).dtype(model->options().dtype);
  std::mt19937 rng(std::random_device{}());
  for (const auto& [batch, ctx] : points) {
    c10::InferenceMode inference;
    const int64_t per_seq = (ctx + kBlock - 1) / kBlock, blocks = batch * per_seq + 1;
    PagedKVCache cache(c, blocks, kBlock, opts);
    for (auto* side : {&cache.k, &cache.v}) {
      for (auto& t : *side) t.normal_(0, 1);
    }
    std::vector<int32_t> ids(blocks - 1);
    for (int64_t i = 0; i < blocks - 1; ++i) ids[i] = static_cast<int32_t>(i + 1);  // Block 0: the trash block.
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<std::vector<int32_t>> tables(batch);
    std::vector<int64_t> tokens(batch), positions(batch, ctx - 1);
    for (int b = 0; b < batch; ++b) {
      tables[b].assign(ids.begin() + b * per_seq, ids.begin() + (b + 1) * per_seq);
      tokens[b] = std::uniform_int_distribution<int64_t>(0, c.vocab_size - 1)(rng);
    }
    double ms[2] = {0, 0};
    for (int kernel = 0; kernel <= 1; ++kernel) {  // The profile, if any, last: it perturbs what follows.
      model->set_fused_kernels(kernel == 1);
      DecodeGraphs graphs(model.get(), &cache, /*trash_block=*/0, per_seq);
      for (int i = 0; i < 3; ++i) graphs.Decode(tokens, positions, tables);  // Capture and warm.
      constexpr int kSteps = 20;
      Sync();
      const double t0 = Now();
      for (int i = 0; i < kSteps; ++i) graphs.Decode(tokens, positions, tables);
      Sync();
      ms[kernel] = (Now() - t0) * 1e3 / kSteps;
      if (graphs.failed()) std::fprintf(stderr, "step: graphs failed (kernel %d)\n", kernel);
      if (profile && kernel == 1) {
        bench::PrintKernelProfile([&] { graphs.Decode(tokens, positions, tables); }, 5,
                                  "\"bench\": \"step_profile\", \"shape\": \"" + shape + "\", \"batch\": " +
                                      std::to_string(batch) + ", \"ctx\": " + std::to_string(ctx), 25);
      }
    }
    model->set_fused_kernels(true);
    std::printf("{\"impl\": \"kernelrl\", \"bench\": \"step\", \"shape\": \"%s\", \"batch\": %d, \"ctx\": %d, "
                "\"kernel_ms\": %.3f, \"gather_ms\": %.3f, \"speedup\": %.2f, \"kernel_tokens_per_s\": %.1f}\n",
                shape.c_str(), batch, ctx, ms[1], ms[0], ms[0] / ms[1], batch / ms[1] * 1e3);
    std::fflush(stdout);
  }
  return 0;
}

int Agentic(const std::string& shape, int rollouts, int turns, bool prefix_caching, int task_tokens = 512,
            int out_tokens = 64, int tool_tokens = 128) {
  const ModelConfig c = Shape(shape);
  EngineOptions o;
  o.max_batch = std::max(rollouts, 1);
  o.max_seq_len = task_tokens + turns * (out_tokens + tool_tokens) + 16;
  o.eos_ids = {-1};
  o.prefix_caching = prefix_caching;
  o.cuda_graphs = !OnCpu(shape);
  PolicyEngine engine(MakeModel(c, OnCpu(shape)), 1, "random", o);
  std::mt19937 rng(std::random_device{}());
  const int vocab = static_cast<int>(c.vocab_size);
  {  // Warm-up on another prompt (shares no block with the task).
    GenerationRequest r;
    r.prompt = RandomTokens(&rng, static_cast<int>(std::min<int64_t>(300, o.max_seq_len - 16)), vocab);
    r.sampling.max_new_tokens = 8;
    RunAll(&engine, {r});
  }
  const PolicyEngine::Info before = engine.GetInfo();
  const std::vector<int32_t> task = RandomTokens(&rng, task_tokens, vocab);
  Sync();
  const double t0 = Now();
  // Each rollout's turns run one after another; the rollouts run together.
  std::vector<std::future<int64_t>> fs;
  for (int r = 0; r < rollouts; ++r) {
    fs.push_back(std::async(std::launch::async, [&, r] {
      std::mt19937 own(static_cast<uint32_t>(rng() + r));
      std::vector<int32_t> history = task;
      int64_t generated = 0;
      for (int t = 0; t < turns; ++t) {
        GenerationRequest q;
        q.prompt = history;
        q.sampling.temperature = 1.0f;
        q.sampling.max_new_tokens = out_tokens;
        q.sampling.seed = 1000 * (r + 1) + t;
        auto res = engine.Generate(q);
        if (!res.ok()) {
          std::fprintf(stderr, "generate: %s\n", res.status().ToString().c_str());
          std::exit(1);
        }
        generated += static_cast<int64_t>(res->output_ids.size());
        history.insert(history.end(), res->output_ids.begin(), res->output_ids.end());
        auto tool = RandomTokens(&own, tool_tokens, vocab);
        history.insert(history.end(), tool.begin(), tool.end());
      }
      return generated;
    }));
  }
  int64_t generated = 0;
  for (auto& f : fs) generated += f.get();
  const double dt = Now() - t0;
  const PolicyEngine::Info after = engine.GetInfo();
  std::printf("{\"impl\": \"kernelrl\", \"bench\": \"agentic\", \"shape\": \"%s\", \"rollouts\": %d, \"turns\": %d, "
              "\"task\": %d, \"out\": %d, \"tool\": %d, "
              "\"prefix_caching\": %s, \"prompt_tokens\": %ld, \"prefill_tokens\": %ld, \"prefix_hit_tokens\": %ld, "
              "\"generated\": %ld, \"preemptions\": %ld, \"graphs_captured\": %d, \"seconds\": %.3f, "
              "\"tokens_per_s_per_rollout\": %.1f}\n",
              shape.c_str(), rollouts, turns, task_tokens, out_tokens, tool_tokens, prefix_caching ? "true" : "false",
              static_cast<long>(after.prompt_tokens - before.prompt_tokens),
              static_cast<long>(after.prefill_tokens - before.prefill_tokens),
              static_cast<long>(after.prefix_hit_tokens - before.prefix_hit_tokens), static_cast<long>(generated),
              static_cast<long>(after.preemptions - before.preemptions), after.decode_graphs, dt,
              generated / dt / std::max(rollouts, 1));
  return 0;
}

int Usage() {
  std::fprintf(stderr,
               "usage: engine_bench decode SHAPE B1,B2,... P N eager|graphs\n"
               "       engine_bench agentic SHAPE ROLLOUTS TURNS on|off [TASK OUT TOOL]\n"
               "       engine_bench step SHAPE B:CTX,B:CTX,... [--profile]\n"
               "SHAPE: 0.5b, 7b, codemodel (CUDA, bf16); tiny, <shape>-cpu (CPU, fp32)\n");
  return 2;
}

}  // namespace
}  // namespace kernelrl::learner

int main(int argc, char** argv) {
  using namespace kernelrl::learner;
  if (!at::hasCUDA() && (argc < 3 || !OnCpu(argv[2]))) {
    std::fprintf(stderr, "engine_bench needs a CUDA device (or SHAPE tiny, or SHAPE-cpu)\n");
    return 1;
  }
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "decode" && argc == 7) {
    std::vector<int> batches;
    for (absl::string_view b : absl::StrSplit(argv[3], ',')) {
      int v = 0;
      if (!absl::SimpleAtoi(b, &v) || v <= 0) return Usage();
      batches.push_back(v);
    }
    return Decode(argv[2], batches, std::atoi(argv[4]), std::atoi(argv[5]), std::string(argv[6]) == "graphs");
  }
  if (mode == "step" && (argc == 4 || (argc == 5 && std::string(argv[4]) == "--profile"))) {
    std::vector<std::pair<int, int>> points;
    for (absl::string_view p : absl::StrSplit(argv[3], ',')) {
      std::vector<absl::string_view> bc = absl::StrSplit(p, ':');
      int b = 0, ctx = 0;
      if (bc.size() != 2 || !absl::SimpleAtoi(bc[0], &b) || !absl::SimpleAtoi(bc[1], &ctx) || b <= 0 || ctx <= 0) {
        return Usage();
      }
      points.push_back({b, ctx});
    }
    return Step(argv[2], points, argc == 5);
  }
  if (mode == "agentic" && argc == 6) {
    return Agentic(argv[2], std::atoi(argv[3]), std::atoi(argv[4]), std::string(argv[5]) == "on");
  }
  if (mode == "agentic" && argc == 9) {
    int task = 0, out = 0, tool = 0;
    if (!absl::SimpleAtoi(argv[6], &task) || !absl::SimpleAtoi(argv[7], &out) || !absl::SimpleAtoi(argv[8], &tool) ||
        task <= 0 || out <= 0 || tool < 0) {
      return Usage();
    }
    return Agentic(argv[2], std::atoi(argv[3]), std::atoi(argv[4]), std::string(argv[5]) == "on", task, out, tool);
  }
  return Usage();
}
