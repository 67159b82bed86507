// The memory plan against what the learner allocates. CPU: a tracking
// allocator (installed as LibTorch's CPU allocator) counts the bytes of every
// live tensor; the peak over model creation and one PPO step of an actor and
// a critic, unsharded and sharded (one rank), is the measured figure.
#include "learner/dist/memory_plan.h"

#include <c10/core/CPUAllocator.h>
#include <stdlib.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <random>

#include "common/testing/testing.h"
#include "gtest/gtest.h"
#include "learner/dist/data_parallel.h"
#include "learner/dist/fsdp.h"
#include "learner/dist/store_backend_for_test.h"
#include "learner/rl/trainer.h"

namespace kernelrl::learner::dist {
namespace {

// Counts live bytes and their peak; allocation is the default CPU allocator's.
class TrackingAllocator : public c10::Allocator {
 public:
  explicit TrackingAllocator(c10::Allocator* inner) : inner_(inner) {}
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    auto* record = new Record{std::move(inner), n, this};
    const int64_t now = live_.fetch_add(static_cast<int64_t>(n)) + static_cast<int64_t>(n);
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    return {data, record, &Free, device};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
  // Starts a measurement: the peak becomes the bytes live now.
  int64_t Reset() {
    peak_ = live_.load();
    return live_.load();
  }
  int64_t peak() const { return peak_.load(); }

 private:
  struct Record {
    c10::DataPtr inner;
    size_t n;
    TrackingAllocator* self;
  };
  static void Free(void* ctx) {
    auto* r = static_cast<Record*>(ctx);
    r->self->live_.fetch_sub(static_cast<int64_t>(r->n));
    delete r;
  }
  c10::Allocator* inner_;
  std::atomic<int64_t> live_{0}, peak_{0};
};

TrackingAllocator* Tracker() {
  static TrackingAllocator* t = [] {
    auto* a = new TrackingAllocator(c10::GetDefaultCPUAllocator());
    c10::SetCPUAllocator(a, /*priority=*/100);
    return a;
  }();
  return t;
}

ModelConfig SmallConfig() {
  ModelConfig c;
  c.model_type = "qwen2";
  c.vocab_size = 1024;
  c.hidden_size = 128;
  c.intermediate_size = 512;
  c.num_layers = 4;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  return c;
}

// One trajectory of `tokens` random ids, every position after the first a model token.
std::vector<rl::Sample> OneRow(int64_t tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  rl::Sample s;
  s.id = "row";
  for (int64_t t = 0; t < tokens; ++t) {
    s.ids.push_back(static_cast<int32_t>(rng() % 1024));
    s.loss_mask.push_back(t > 0);
    s.rollout_logprobs.push_back(t > 0 ? -0.1f - static_cast<float>(rng() % 1000) / 500.0f : 0.0f);
  }
  s.reward = 0.5;
  return {s};
}

// Peak bytes over creating the actor and critic and one PPO step.
int64_t MeasurePeak(int64_t tokens, bool sharded, bool checkpointing, int64_t lora) {
  TrackingAllocator* tracker = Tracker();
  const int64_t before = tracker->Reset();
  std::unique_ptr<DataParallel> dp;
  int64_t peak = 0;
  {
    ModelOptions o;
    o.trainable = true;
    o.activation_checkpointing = checkpointing;
    o.lora_rank = lora;
    auto actor = Transformer::Create(SmallConfig(), Head::kLanguageModel, o, 1);
    auto critic = Transformer::Create(SmallConfig(), Head::kValue, o, 2);
    EXPECT_TRUE(actor.ok() && critic.ok());
    rl::TrainerOptions opt;
    opt.max_tokens_per_row = tokens;
    if (sharded) {
      const std::string store = "file://" + ::kernelrl::testing::NewTempDir("plan_test_") + "/store";
      auto c = DataParallel::Connect({0, 1, store, absl::Seconds(60)}, at::kCPU, [](auto s, int rank, int n) {
        return c10::make_intrusive<StoreBackendForTest>(s, rank, n);
      });
      EXPECT_TRUE(c.ok()) << c.status();
      dp = std::move(*c);
      EXPECT_TRUE(ShardedWeights::Shard(**actor, dp->backend(), at::kCPU, at::kFloat).ok());
      EXPECT_TRUE(ShardedWeights::Shard(**critic, dp->backend(), at::kCPU, at::kFloat).ok());
      UseShardedModels(&opt);
    }
    rl::Trainer t(std::move(*actor), std::move(*critic), opt);
    if (dp) t.set_collectives(dp.get());
    auto m = t.PpoStep(OneRow(tokens, 7));
    EXPECT_TRUE(m.ok()) << m.status();
    peak = tracker->peak() - before;
  }
  return peak;
}

struct Case {
  int64_t tokens;
  bool sharded, checkpointing;
  int64_t lora = 0;
};

TEST(MemoryPlanTest, PlanIsWithinTenPercentOfTheMeasuredPeakOnTheCpu) {
  for (const Case& k : {Case{256, false, false}, Case{256, false, true}, Case{1024, false, true},
                        Case{256, true, true}, Case{1024, true, false}, Case{1024, false, true, 8},
                        Case{1024, true, true, 8}, Case{256, true, false, 8}}) {
    const int64_t measured = MeasurePeak(k.tokens, k.sharded, k.checkpointing, k.lora);
    PlanOptions o;
    o.cuda = false;
    o.world_size = 1;
    o.tokens = k.tokens;
    o.sharded = k.sharded;
    o.activation_checkpointing = k.checkpointing;
    o.actor_lora_rank = o.critic_lora_rank = k.lora;
    const ModelConfig c = SmallConfig();
    const MemoryPlan plan = PlanMemory(c, &c, o);
    const double ratio = static_cast<double>(plan.total) / static_cast<double>(measured);
    std::printf("tokens %lld sharded %d checkpointing %d lora %lld: measured %.2f MiB, planned %.2f MiB (%.3f)\n%s",
                static_cast<long long>(k.tokens), k.sharded, k.checkpointing, static_cast<long long>(k.lora), measured / 1048576.0,
                plan.total / 1048576.0, ratio, plan.Table().c_str());
    EXPECT_NEAR(ratio, 1.0, 0.10) << "tokens " << k.tokens << " sharded " << k.sharded << " checkpointing "
                                  << k.checkpointing << " lora " << k.lora;
  }
}

TEST(MemoryPlanTest, ShardingDividesTheStatesAndAJobThatCannotFitIsRefused) {
  ModelConfig qwen7b;  // Qwen2.5-7B's shape.
  qwen7b.vocab_size = 152064, qwen7b.hidden_size = 3584, qwen7b.intermediate_size = 18944;
  qwen7b.num_layers = 28, qwen7b.num_heads = 28, qwen7b.num_kv_heads = 4, qwen7b.head_dim = 128;
  PlanOptions one;
  one.sharded = false;
  one.tokens = 32768;
  const MemoryPlan whole = PlanMemory(qwen7b, &qwen7b, one);
  absl::Status refused = CheckFits(whole);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("GiB per GPU"), std::string::npos) << refused;
  PlanOptions four = one;
  four.sharded = true;
  four.world_size = 4;
  four.device_bytes = int64_t{141} << 30;  // H200.
  const MemoryPlan sharded = PlanMemory(qwen7b, &qwen7b, four);
  EXPECT_LT(sharded.total, whole.total / 2);
  EXPECT_TRUE(CheckFits(sharded).ok()) << sharded.Table();
  // Host moments take 8 bytes of each parameter shard off every GPU: a 7B
  // actor + critic at 32K then fits four 80 GB cards.
  PlanOptions offload = four;
  offload.device_bytes = int64_t{80} << 30;
  offload.offload_moments = true;
  const MemoryPlan host = PlanMemory(qwen7b, &qwen7b, offload);
  // Actor + critic parameters: the critic has a value head, not the LM head.
  const int64_t shard = (2 * qwen7b.ParameterCount() - qwen7b.vocab_size * qwen7b.hidden_size + 3) / 4;
  EXPECT_NEAR(static_cast<double>(sharded.total - host.total), 8.0 * shard, 0.01 * 8.0 * shard);
  EXPECT_TRUE(CheckFits(host).ok()) << host.Table();
  // Qwen2.5's whole 128K context in one trajectory on four 80 GB cards: only
  // with the layers' saved inputs in host memory (2 x 28 layers x 0.9 GiB).
  PlanOptions longest = offload;
  longest.tokens = 131072;
  const MemoryPlan kept = PlanMemory(qwen7b, &qwen7b, longest);
  longest.offload_activations = true;
  const MemoryPlan moved = PlanMemory(qwen7b, &qwen7b, longest);
  EXPECT_FALSE(CheckFits(kept).ok()) << kept.Table();
  EXPECT_TRUE(CheckFits(moved).ok()) << moved.Table();
  const double inputs = 2.0 * 26 * 131072 * qwen7b.hidden_size * 2;  // 28 layers' inputs less the 2 on the GPU.
  EXPECT_NEAR(static_cast<double>(kept.total - moved.total), inputs, 0.01 * inputs);
  // The offloaded inputs and host moments are pinned host memory: a host too small refuses the job.
  EXPECT_NEAR(static_cast<double>(moved.host_bytes - kept.host_bytes), inputs, 0.01 * inputs);
  longest.host_limit_bytes = moved.host_bytes - 1;
  const absl::Status pinned = CheckFits(PlanMemory(qwen7b, &qwen7b, longest));
  EXPECT_EQ(pinned.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(pinned.message().find("pinned host memory"), std::string::npos) << pinned;
  std::printf("7B actor + critic, 32K tokens:\n unsharded, 1 GPU:\n%s sharded, 4 GPUs:\n%s sharded, 4 GPUs, host "
              "moments:\n%s",
              whole.Table().c_str(), sharded.Table().c_str(), host.Table().c_str());
}

}  // namespace
}  // namespace kernelrl::learner::dist
