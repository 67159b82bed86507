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
//   ppo_bench dp <tokens> <shape> <trajectories> <gpus>
//       data-parallel (c10d ProcessGroupNCCL, one process per GPU, spawned
//       by this one): the first DP step's loss and gradients against one GPU
//       on the same global batch and initial weights (relative L2 error, bf16
//       tolerance 2e-2), then step time and the N-GPU / 1-GPU throughput
//       ratio; JSON line from rank 0, exit 1 if the step differs.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "learner/checkpoint.h"
#include "learner/dist/data_parallel.h"
#include "learner/dist/launcher.h"
#include "learner/dist/shard.h"
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

std::unique_ptr<Transformer> Make(const ModelConfig& c, Head head, uint64_t seed, int gpu = 0) {
  ModelOptions o;
  o.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(gpu));
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

// Mean wall time of `iters` steps (after the ones already taken).
double TimedSteps(Trainer& t, const std::vector<Sample>& batch, int64_t n_global, int iters, int gpu) {
  double sum = 0;
  for (int i = 0; i < iters; ++i) {
    c10::cuda::device_synchronize();
    const double t0 = Now();
    auto m = t.PpoStep(batch, n_global);
    c10::cuda::device_synchronize();
    if (!m.ok()) {
      std::fprintf(stderr, "gpu %d: %s\n", gpu, m.status().ToString().c_str());
      std::exit(1);
    }
    sum += Now() - t0;
  }
  return sum / iters;
}

int DpBench(int64_t tokens, const std::string& shape, int n, int world, const dist::RankFlags& flags) {
  const ModelConfig c = Shape(shape);
  TrainerOptions o;
  o.max_tokens_per_row = std::max<int64_t>(32768, tokens / n);
  const std::vector<Sample> batch = Batch(tokens, n, c.vocab_size, 3);
  const int rank = flags.rank;
  std::map<std::string, std::vector<at::Tensor>> ref;  // One GPU's gradients (bf16, on cuda:0).
  double ref_loss = 0, single_s = 0;
  std::string address = flags.rendezvous;
  std::vector<pid_t> pids;
  if (rank == 0) {
    if (c10::cuda::device_count() < world) {
      std::fprintf(stderr, "dp: asked for %d GPUs, this machine has %d\n", world, c10::cuda::device_count());
      return 1;
    }
    Trainer t(Make(c, Head::kLanguageModel, 1), Make(c, Head::kValue, 2), o);
    t.set_grad_observer([&](const std::string& model, const std::vector<at::Tensor>& grads) {
      for (const at::Tensor& g : grads) ref[model].push_back(g.detach().clone());
    });
    auto m = t.PpoStep(batch);
    if (!m.ok()) return std::fprintf(stderr, "%s\n", m.status().ToString().c_str()), 1;
    ref_loss = (*m)["policy_loss"] + (*m)["value_loss"];
    t.set_grad_observer(nullptr);
    single_s = TimedSteps(t, batch, 0, 2, 0);
    auto a = dist::DataParallel::HostTcpStore("127.0.0.1", 0, absl::Minutes(5));
    if (!a.ok()) return std::fprintf(stderr, "%s\n", a.status().ToString().c_str()), 1;
    address = *a;
    auto p = dist::SpawnRanks({"dp", std::to_string(tokens), shape, std::to_string(n), std::to_string(world)}, world,
                              address);
    if (!p.ok()) return std::fprintf(stderr, "%s\n", p.status().ToString().c_str()), 1;
    pids = *p;
  }
  const double t_connect = Now();
  auto dp = dist::DataParallel::ConnectNccl({rank, world, address, absl::Minutes(5)}, rank);
  if (!dp.ok()) return std::fprintf(stderr, "rank %d: %s\n", rank, dp.status().ToString().c_str()), 1;
  const double connect_s = Now() - t_connect;
  Trainer t(Make(c, Head::kLanguageModel, 1, rank), Make(c, Head::kValue, 2, rank), o);
  t.set_collectives(dp->get());
  if (auto s = t.BroadcastParameters(); !s.ok()) {  // As the learner does: every rank starts from rank 0's weights.
    return std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str()), 1;
  }
  std::vector<int64_t> lengths;
  for (const Sample& s : batch) lengths.push_back(static_cast<int64_t>(s.ids.size()));
  const std::vector<std::vector<int>> shards = dist::ShardByTokens(lengths, world);
  std::vector<Sample> shard;
  for (int i : shards[rank]) shard.push_back(batch[i]);
  // Relative L2 error of the reduced gradients against one GPU's, overall and worst tensor.
  double err2 = 0, ref2 = 0, worst = 0;
  if (rank == 0) {
    t.set_grad_observer([&](const std::string& model, const std::vector<at::Tensor>& grads) {
      for (size_t i = 0; i < grads.size(); ++i) {
        const at::Tensor r = ref[model][i].to(at::kFloat), g = grads[i].to(at::kFloat);
        const double e = (g - r).square().sum().item<double>(), q = r.square().sum().item<double>();
        err2 += e, ref2 += q;
        if (q > 0) worst = std::max(worst, std::sqrt(e / q));
      }
    });
  }
  auto m = t.PpoStep(shard, n);
  if (!m.ok()) return std::fprintf(stderr, "rank %d: %s\n", rank, m.status().ToString().c_str()), 1;
  t.set_grad_observer(nullptr);
  ref.clear();
  const double dp_s = TimedSteps(t, shard, n, 2, rank);
  if (rank != 0) return 0;
  const double loss = (*m)["policy_loss"] + (*m)["value_loss"];
  const double grad_rel = std::sqrt(err2 / std::max(ref2, 1e-30));
  const double loss_rel = std::abs(loss - ref_loss) / std::max(std::abs(ref_loss), 1e-12);
  const bool same = grad_rel <= 2e-2 && loss_rel <= 2e-2;
  std::printf("{\"bench\": \"ppo_step_dp\", \"shape\": \"%s\", \"gpus\": %d, \"tokens\": %ld, "
              "\"trajectories\": %d, \"loss_1gpu\": %.6f, \"loss_dp\": %.6f, \"loss_rel_err\": %.2e, "
              "\"grad_rel_l2_err\": %.2e, \"grad_worst_tensor_rel_err\": %.2e, \"same_step\": %s, "
              "\"step_s_1gpu\": %.3f, \"step_s_dp\": %.3f, \"tokens_per_s_1gpu\": %.0f, \"tokens_per_s_dp\": %.0f, "
              "\"throughput_ratio\": %.2f, \"nccl_connect_s\": %.1f}\n",
              shape.c_str(), world, static_cast<long>(tokens), n, ref_loss, loss, loss_rel, grad_rel, worst,
              same ? "true" : "false", single_s, dp_s, tokens / single_s, tokens / dp_s, single_s / dp_s, connect_s);
  std::fflush(stdout);
  (*dp)->Shutdown();  // The other ranks' exit waits for rank 0's communicators to go.
  const absl::Status ranks = dist::WaitRanks(pids);
  if (!ranks.ok()) std::fprintf(stderr, "%s\n", ranks.ToString().c_str());
  return same && ranks.ok() ? 0 : 1;
}

}  // namespace
}  // namespace kernelrl::learner::rl

int main(int argc, char** argv) {
  auto flags = kernelrl::learner::dist::TakeRankFlags(&argc, argv);
  if (!flags.ok()) return std::fprintf(stderr, "%s\n", flags.status().ToString().c_str()), 2;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "dp" && argc > 5) {
    return kernelrl::learner::rl::DpBench(std::atoll(argv[2]), argv[3], std::atoi(argv[4]), std::atoi(argv[5]),
                                          *flags);
  }
  if (mode == "step" && argc > 2) {
    return kernelrl::learner::rl::StepBench(std::atoll(argv[2]), argc > 3 ? argv[3] : "qwen2-0.5b",
                                            argc > 4 ? std::atoi(argv[4]) : 1);
  }
  if (mode == "sync" && argc > 2) return kernelrl::learner::rl::SyncBench(argv[2]);
  std::fprintf(stderr,
               "usage: ppo_bench step <tokens> [qwen2-0.5b|small] [trajectories] | sync <dir> | "
               "dp <tokens> <shape> <trajectories> <gpus>\n");
  return 2;
}
