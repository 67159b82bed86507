// GPU benchmark of fully sharded PPO steps (learner/dist/fsdp.h): an actor
// and a critic of one shape (random init), bf16 compute, fp32 master shards,
// activation checkpointing, one process per GPU over ProcessGroupNCCL.
//
//   fsdp_bench plan <shape> <tokens_per_gpu> <gpus>
//       the memory plan only (no GPU needed)
//   fsdp_bench step <shape> <tokens_per_gpu> <gpus>
//       each GPU trains on tokens_per_gpu tokens per step; prints one JSON
//       line: step time, tokens/s/GPU, MFU against 989 TFLOP/s (the trainer's
//       FLOP count, recomputation not counted), peak allocated memory per GPU
//       (largest over ranks) beside the plan's figure
//   fsdp_bench smoke <ranks>
//       the step bench's whole path on the CPU with a tiny shape (fp32, the
//       test store backend instead of NCCL): a check before spending GPU time
//   fsdp_bench longest <shape> <gpus> <tokens>...
//       one trajectory of each length in turn (on one rank; the others run
//       empty passes, as a batch of one trajectory does): the first length
//       that fails (out of memory) ends the run; one JSON line per length
//       (AdamW moments in host memory: AdamWParams::offload_moments)
//   --lora_rank=R (any mode): actor and critic train LoRA adapters of rank R
//       on frozen base weights instead of every weight
//   --offload_activations (any mode): each block's checkpointed input in
//       pinned host memory between forward and backward
//   --memory_trace=PATH (step): rank 0 records the CUDA allocator's history
//       over the first measured step (C++ stacks) and writes the pickled
//       snapshot to PATH (torch.cuda.memory's format; tools/memory_peak.py
//       lists what is alive at the peak)
//
// Shapes: qwen2.5-7b, qwen2.5-1.5b, qwen2.5-0.5b (Qwen2.5's published sizes).
// Rows are the trajectories: a job whose plan does not fit the GPU with one
// row of tokens_per_gpu splits the GPU's tokens into more trajectories
// (halving the row) until it does, and says so ("row_tokens"); before
// halving, the AdamW moments move to host memory ("offload_moments").
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/cuda/memory_snapshot.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "learner/dist/data_parallel.h"
#include "learner/dist/fsdp.h"
#include "learner/dist/launcher.h"
#include "learner/dist/memory_plan.h"
#include "learner/dist/store_backend_for_test.h"
#include "learner/bench/shapes.h"
#include "learner/model.h"
#include "learner/rl/trainer.h"

namespace kernelrl::learner::bench {
namespace {

using rl::Sample;

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
double GiB(double b) { return b / (1 << 30); }

// LoRA adapters' rank of both models (--lora_rank; 0: full training).
int64_t lora_rank = 0;
// Where rank 0 writes the allocator's history of one step (--memory_trace; empty: none).
std::string memory_trace;
// Checkpointed block inputs in host memory (--offload_activations).
bool offload_activations = false;

dist::PlanOptions PlanFor(int gpus, int64_t row_tokens, int64_t device_bytes, bool cpu = false,
                          bool offload = false) {
  dist::PlanOptions o;
  o.actor_lora_rank = o.critic_lora_rank = lora_rank;
  o.offload_activations = offload_activations;
  o.offload_moments = offload;
  o.world_size = gpus;
  o.tokens = row_tokens;
  o.sharded = true;
  o.activation_checkpointing = true;
  o.cuda = !cpu;
  o.device_bytes = device_bytes;
  return o;
}

// n trajectories of `len` tokens: a 512-token prompt, then turns of 256 model
// and 256 tool tokens; random ids and rollout log-probs from `seed`.
std::vector<Sample> Trajectories(int n, int64_t len, int64_t vocab, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<Sample> out;
  for (int i = 0; i < n; ++i) {
    Sample s;
    s.id = absl::StrCat(seed, "-", i);
    at::Tensor ids = at::randint(vocab, {len}, gen, at::kLong).contiguous();
    at::Tensor lp = (-at::rand({len}, gen) * 4).contiguous();
    const int64_t* id = ids.data_ptr<int64_t>();
    const float* l = lp.data_ptr<float>();
    for (int64_t t = 0; t < len; ++t) {
      const bool model = t >= std::min<int64_t>(512, len - 1) && ((t - 512) / 256) % 2 == 0;
      s.ids.push_back(static_cast<int32_t>(id[t]));
      s.loss_mask.push_back(model);
      s.rollout_logprobs.push_back(model ? l[t] : 0.0f);
    }
    s.reward = static_cast<double>(i % 4) - 1;
    out.push_back(std::move(s));
  }
  return out;
}

struct Rank {
  std::unique_ptr<dist::DataParallel> dp;
  std::vector<pid_t> pids;
  int rank = 0, world = 1;
  bool cpu = false;  // The smoke run.
  at::Device device() const { return cpu ? at::Device(at::kCPU) : at::Device(at::kCUDA, rank); }
  void Sync() const {
    if (!cpu) c10::cuda::device_synchronize();
  }
};

// Rank 0 hosts the store and spawns the others with `args`.
absl::StatusOr<Rank> Join(const std::vector<std::string>& args, int world, const dist::RankFlags& flags,
                          bool cpu = false) {
  Rank r;
  r.rank = flags.rank, r.world = world, r.cpu = cpu;
  std::string address = flags.rendezvous;
  if (r.rank == 0) {
    if (!cpu && c10::cuda::device_count() < world) {
      return absl::FailedPreconditionError(
          absl::StrCat("asked for ", world, " GPUs, this machine has ", c10::cuda::device_count()));
    }
    auto a = dist::DataParallel::HostTcpStore("127.0.0.1", 0, absl::Minutes(5));
    if (!a.ok()) return a.status();
    address = *a;
    if (world > 1) {
      std::vector<std::string> rank_args = args;
      rank_args.push_back(absl::StrCat("--lora_rank=", lora_rank));
      if (offload_activations) rank_args.push_back("--offload_activations");
      auto p = dist::SpawnRanks(rank_args, world, address);
      if (!p.ok()) return p.status();
      r.pids = *p;
    }
  }
  auto dp = cpu ? dist::DataParallel::Connect({r.rank, world, address, absl::Minutes(3)}, at::kCPU,
                                              [](auto s, int rank, int n) {
                                                return c10::make_intrusive<dist::StoreBackendForTest>(s, rank, n);
                                              })
                : dist::DataParallel::ConnectNccl({r.rank, world, address, absl::Minutes(3)}, r.rank);
  if (!dp.ok()) return dp.status();
  r.dp = std::move(*dp);
  return r;
}

// Actor and critic drawn on this rank's GPU (on the CPU for the CPU smoke
// run), then sharded there; only the shards stay.
absl::StatusOr<std::unique_ptr<rl::Trainer>> MakeTrainer(const ModelConfig& c, Rank& r, int64_t row_tokens,
                                                         bool offload) {
  const at::Device gpu = r.device();
  const at::ScalarType dtype = r.cpu ? at::kFloat : at::kBFloat16;
  std::unique_ptr<Transformer> models[2];
  for (int k = 0; k < 2; ++k) {
    ModelOptions o;
    o.device = gpu;          // Drawn and cut on the GPU: CPU draws took ~4 minutes at 7B.
    o.draw_on_device = true;
    o.dtype = dtype;
    o.activation_checkpointing = true;
    o.lora_rank = lora_rank;
    o.lora_seed = 11 + k;
    o.offload_activations = offload_activations;
    auto m = Transformer::Create(c, k == 0 ? Head::kLanguageModel : Head::kValue, o, 1 + k);
    if (!m.ok()) return m.status();
    auto s = dist::ShardedWeights::Shard(**m, r.dp->backend(), gpu, dtype);
    if (!s.ok()) return s.status();
    models[k] = std::move(*m);
  }
  rl::TrainerOptions opt;
  opt.max_tokens_per_row = row_tokens;
  dist::UseShardedModels(&opt);
  opt.actor.offload_moments = opt.critic.offload_moments = offload;
  auto t = std::make_unique<rl::Trainer>(std::move(models[0]), std::move(models[1]), opt);
  t->set_collectives(r.dp.get());
  return t;
}

double MaxOverRanks(Rank& r, double v) {
  std::vector<at::Tensor> t = {at::tensor(std::vector<double>{v}, at::kDouble).to(r.dp->device())};
  if (!r.dp->AllReduceMax(t).ok()) return v;
  return t[0].item<double>();
}

// Rank 0 hosts the store: it waits for the other ranks before closing it,
// but destroys its communicators first (their exit waits for rank 0's).
int Finish(Rank& r, std::unique_ptr<rl::Trainer>& t) {
  t.reset();
  r.dp->Shutdown();
  const absl::Status ranks = r.rank != 0 ? absl::OkStatus() : dist::WaitRanks(r.pids);
  if (!ranks.ok()) std::fprintf(stderr, "rank 0: %s\n", ranks.ToString().c_str());
  r.dp.reset();
  return ranks.ok() ? 0 : 1;
}

int Fail(const Rank* r, const std::string& what) {
  std::fprintf(stderr, "rank %d: %s\n", r != nullptr ? r->rank : 0, what.c_str());
  return 1;
}

int Plan(const std::string& shape, int64_t tokens, int gpus) {
  const ModelConfig c = Shape(shape);
  const dist::MemoryPlan plan = dist::PlanMemory(c, &c, PlanFor(gpus, tokens, int64_t{80} << 30));
  std::printf("%s actor + critic, %d GPUs, %ld-token rows:\n%s", shape.c_str(), gpus, static_cast<long>(tokens),
              plan.Table().c_str());
  return 0;
}

int Step(const std::string& shape, int64_t tokens, int gpus, const dist::RankFlags& flags, bool cpu = false) {
  const ModelConfig c = Shape(shape);
  auto r = cpu ? Join({"smoke", std::to_string(gpus)}, gpus, flags, true)
               : Join({"step", shape, std::to_string(tokens), std::to_string(gpus)}, gpus, flags);
  if (!r.ok()) return Fail(nullptr, r.status().ToString());
  const size_t total_b =
      cpu ? size_t{64} << 30 : at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(r->rank))->totalGlobalMem;
  // The longest row whose plan fits, with the moments on the GPU if they
  // fit there and in host memory if not; refused before allocating when none does.
  int64_t row = tokens;
  bool offload = false;
  auto plan_for = [&] { return dist::PlanMemory(c, &c, PlanFor(gpus, row, static_cast<int64_t>(total_b), cpu, offload)); };
  dist::MemoryPlan plan = plan_for();
  if (!dist::CheckFits(plan).ok() && !cpu) offload = true, plan = plan_for();
  while (!dist::CheckFits(plan).ok() && row > 1024) {
    row /= 2;
    plan = plan_for();
  }
  if (auto s = dist::CheckFits(plan); !s.ok()) return Fail(&*r, s.ToString());
  if (r->rank == 0) {
    std::fprintf(stderr, "plan (%ld-token rows%s):\n%s", static_cast<long>(row), offload ? ", host moments" : "",
                 plan.Table().c_str());
  }
  const double t0 = Now();
  auto t = MakeTrainer(c, *r, row, offload);
  if (!t.ok()) return Fail(&*r, t.status().ToString());
  const double setup_s = Now() - t0;
  const int n = static_cast<int>(tokens / row);
  int64_t global = 0;
  double step_s = 0, flops = 0;
  const int iters = 2;
  for (int i = 0; i <= iters; ++i) {  // Step 0 warms up (allocator, kernels).
    const std::vector<Sample> batch = Trajectories(n, row, c.vocab_size, 1000 * i + r->rank);
    global = static_cast<int64_t>(n) * gpus;
    if (i == 1 && !cpu) c10::cuda::CUDACachingAllocator::resetPeakStats(r->rank);
    const bool trace = i == 1 && !cpu && r->rank == 0 && !memory_trace.empty();
    if (trace) torch::cuda::_record_memory_history("all", "all", "all", 1000000);
    r->Sync();
    const double s0 = Now();
    auto m = (*t)->PpoStep(batch, global);
    r->Sync();
    if (trace) {
      const double w0 = Now();
      const std::string snapshot = torch::cuda::_memory_snapshot_pickled();
      torch::cuda::_record_memory_history(std::nullopt);
      std::FILE* f = std::fopen(memory_trace.c_str(), "wb");
      if (f != nullptr) std::fwrite(snapshot.data(), 1, snapshot.size(), f), std::fclose(f);
      std::fprintf(stderr, "memory trace: %zu bytes to %s in %.1f s\n", snapshot.size(), memory_trace.c_str(),
                   Now() - w0);
    }
    if (!m.ok()) return Fail(&*r, m.status().ToString());
    if (i > 0) step_s += Now() - s0, flops += (*m)["train_flops"];
  }
  step_s /= iters, flops /= iters;
  double peak = 0, reserved = 0;  // Not measured on the CPU.
  if (!cpu) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(r->rank);
    peak = static_cast<double>(stats.allocated_bytes[0].peak), reserved = static_cast<double>(stats.reserved_bytes[0].peak);
  }
  peak = MaxOverRanks(*r, peak);
  reserved = MaxOverRanks(*r, reserved);
  const double slowest = MaxOverRanks(*r, step_s);
  if (r->rank == 0) {
    // The plan's figure without its fixed CUDA/NCCL reserve: what the allocator counts.
    const double planned = static_cast<double>(plan.total - (cpu ? 0 : PlanFor(gpus, row, 0).reserved_bytes));
    const std::string ratio = peak > 0 ? absl::StrFormat("%.3f", planned / peak) : "null";  // No peak on the CPU.
    std::printf("{\"bench\": \"fsdp_ppo_step\", \"shape\": \"%s\", \"params_per_model\": %ld, \"gpus\": %d, "
                "\"tokens_per_gpu\": %ld, \"row_tokens\": %ld, \"step_s\": %.3f, \"tokens_per_s_per_gpu\": %.0f, "
                "\"tflops_per_gpu\": %.1f, \"mfu_vs_989\": %.3f, \"peak_allocated_gib\": %.2f, "
                "\"peak_reserved_gib\": %.2f, \"planned_gib\": %.4f, \"plan_over_peak\": %s, \"setup_s\": %.1f, "
                "\"device_gib\": %.1f, \"offload_moments\": %s, \"lora_rank\": %ld}\n",
                shape.c_str(), static_cast<long>(c.ParameterCount()), gpus, static_cast<long>(tokens),
                static_cast<long>(row), slowest, tokens / slowest, flops / gpus / slowest / 1e12,
                flops / gpus / slowest / 989e12, GiB(peak), GiB(reserved), GiB(planned), ratio.c_str(), setup_s,
                GiB(static_cast<double>(total_b)), offload ? "true" : "false", static_cast<long>(lora_rank));
    std::fflush(stdout);
  }
  return Finish(*r, *t);
}

int Longest(const std::string& shape, int gpus, const std::vector<int64_t>& lengths, const dist::RankFlags& flags) {
  const ModelConfig c = Shape(shape);
  std::vector<std::string> args = {"longest", shape, std::to_string(gpus)};
  for (int64_t l : lengths) args.push_back(std::to_string(l));
  auto r = Join(args, gpus, flags);
  if (!r.ok()) return Fail(nullptr, r.status().ToString());
  const size_t total_b = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(r->rank))->totalGlobalMem;
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  auto t = MakeTrainer(c, *r, longest, /*offload=*/true);  // The most room for activations.
  if (!t.ok()) return Fail(&*r, t.status().ToString());
  for (int64_t len : lengths) {
    const dist::MemoryPlan plan =
        dist::PlanMemory(c, &c, PlanFor(gpus, len, static_cast<int64_t>(total_b), false, /*offload=*/true));
    // One trajectory in the whole batch: rank 0 trains on it, the others run empty passes.
    std::vector<Sample> batch;
    if (r->rank == 0) batch = Trajectories(1, len, c.vocab_size, 7);
    c10::cuda::CUDACachingAllocator::resetPeakStats(r->rank);
    c10::cuda::device_synchronize();
    const double s0 = Now();
    absl::StatusOr<rl::StepMetrics> m = absl::InternalError("not run");
    try {
      m = (*t)->PpoStep(batch, 1);
      c10::cuda::device_synchronize();
    } catch (const std::exception& e) {
      m = absl::ResourceExhaustedError(e.what());
    }
    if (!m.ok()) {
      // The other ranks wait in a collective until the timeout; rank 0's exit ends them.
      std::printf("{\"bench\": \"fsdp_longest\", \"shape\": \"%s\", \"gpus\": %d, \"tokens\": %ld, \"ok\": false, "
                  "\"planned_gib\": %.2f, \"error\": \"%.200s\"}\n",
                  shape.c_str(), gpus, static_cast<long>(len), GiB(plan.total), m.status().message().data());
      std::fflush(stdout);
      std::_Exit(3);
    }
    const double step_s = Now() - s0;
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(r->rank);
    const double peak = MaxOverRanks(*r, static_cast<double>(stats.allocated_bytes[0].peak));
    if (r->rank == 0) {
      std::printf("{\"bench\": \"fsdp_longest\", \"shape\": \"%s\", \"gpus\": %d, \"tokens\": %ld, \"ok\": true, "
                  "\"step_s\": %.2f, \"peak_allocated_gib\": %.2f, \"planned_gib\": %.2f, \"plan_fits\": %s, "
                  "\"lora_rank\": %ld, \"offload_activations\": %s, \"value_loss\": %.9g, \"actor_grad_norm\": %.9g}\n",
                  shape.c_str(), gpus, static_cast<long>(len), step_s, GiB(peak),
                  GiB(static_cast<double>(plan.total - PlanFor(gpus, len, 0).reserved_bytes)),
                  dist::CheckFits(plan).ok() ? "true" : "false", static_cast<long>(lora_rank),
                  offload_activations ? "true" : "false", (*m)["value_loss"], (*m)["actor_grad_norm"]);
      std::fflush(stdout);
    }
  }
  return Finish(*r, *t);
}

}  // namespace
}  // namespace kernelrl::learner::bench

int main(int argc, char** argv) {
  namespace b = kernelrl::learner::bench;
  auto flags = kernelrl::learner::dist::TakeRankFlags(&argc, argv);
  if (!flags.ok()) return std::fprintf(stderr, "%s\n", flags.status().ToString().c_str()), 2;
  for (int i = 1; i < argc; ++i) {  // --lora_rank=R, --memory_trace=PATH: out of the positional arguments.
    const std::string a = argv[i];
    if (a == "--offload_activations") {
      b::offload_activations = true;
    } else if (a.rfind("--memory_trace=", 0) == 0) {
      b::memory_trace = a.substr(15);
    } else if (a.rfind("--lora_rank=", 0) == 0) {
      b::lora_rank = std::atoll(a.c_str() + 12);
    } else {
      continue;
    }
    for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
    --argc, --i;
  }
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "plan" && argc == 5) return b::Plan(argv[2], std::atoll(argv[3]), std::atoi(argv[4]));
  if (mode == "step" && argc == 5) return b::Step(argv[2], std::atoll(argv[3]), std::atoi(argv[4]), *flags);
  if (mode == "smoke" && argc == 3) return b::Step("tiny", 256, std::atoi(argv[2]), *flags, /*cpu=*/true);
  if (mode == "longest" && argc > 4) {
    std::vector<int64_t> lengths;
    for (int i = 4; i < argc; ++i) lengths.push_back(std::atoll(argv[i]));
    return b::Longest(argv[2], std::atoi(argv[3]), lengths, *flags);
  }
  std::fprintf(stderr,
               "usage: fsdp_bench [--lora_rank=R] [--offload_activations] [--memory_trace=PATH] plan <shape> <tokens_per_gpu> <gpus> | step <shape> <tokens_per_gpu> "
               "<gpus> | smoke <ranks> | longest <shape> <gpus> <tokens>...\n");
  return 2;
}
