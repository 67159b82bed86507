// The engine's /metrics series follow its Info(): KV blocks by state,
// prefix-cache hits, prefill tokens, generated tokens; and a scrape after
// the engine is gone (metrics detached) still works.
#include "learner/policy/engine_metrics.h"

#include <c10/core/GradMode.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "learner/model.h"
#include "learner/test_util.h"

namespace kernelrl::learner {
namespace {

bool HasLine(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST(EngineMetricsTest, SeriesFollowTheEngine) {
  auto model = Transformer::Create(learner::testing::TinyQwen2Config(61), Head::kLanguageModel, {}, 5);
  ASSERT_TRUE(model.ok());
  EngineOptions o;
  o.max_batch = 4;
  o.max_seq_len = 64;
  o.block_size = 4;
  o.kv_blocks = 40;
  auto engine = std::make_unique<PolicyEngine>(std::move(*model), 1, "", o);
  MetricsRegistry registry;
  auto metrics = std::make_unique<EngineMetrics>(engine.get(), &registry, "cpu");
  std::mt19937 rng(std::random_device{}());
  GenerationRequest r;
  for (int i = 0; i < 13; ++i) r.prompt.push_back(std::uniform_int_distribution<int>(0, 60)(rng));
  r.sampling.temperature = 0;
  r.sampling.max_new_tokens = 5;
  ASSERT_TRUE(engine->Generate(r).ok());
  ASSERT_TRUE(engine->Generate(r).ok());  // Same prompt: 3 full blocks from the cache.
  const PolicyEngine::Info info = engine->GetInfo();
  const std::string text = registry.Expose();
  EXPECT_TRUE(HasLine(text, "kernelrl_policy_kv_blocks{engine=\"cpu\",state=\"used\"} 0")) << text;
  EXPECT_TRUE(HasLine(text, absl::StrCat("kernelrl_policy_kv_blocks{engine=\"cpu\",state=\"cached\"} ",
                                         info.kv_blocks_cached)))
      << text;
  EXPECT_GT(info.kv_blocks_cached, 0);
  EXPECT_TRUE(HasLine(text, "kernelrl_policy_prefix_hit_tokens_total{engine=\"cpu\"} 12")) << text;
  EXPECT_TRUE(HasLine(text, "kernelrl_policy_prompt_tokens_total{engine=\"cpu\"} 26")) << text;
  EXPECT_TRUE(HasLine(text, "kernelrl_policy_prefill_tokens_total{engine=\"cpu\"} 14")) << text;
  EXPECT_TRUE(HasLine(text, "kernelrl_policy_generated_tokens_total{engine=\"cpu\"} 10")) << text;
  EXPECT_TRUE(HasLine(text, "kernelrl_policy_preemptions_total{engine=\"cpu\"} 0")) << text;
  EXPECT_TRUE(HasLine(text, "kernelrl_policy_gpu_lease_wait_seconds_total{engine=\"cpu\"} 0")) << text;
  EXPECT_TRUE(HasLine(text, "kernelrl_policy_running_sequences{engine=\"cpu\"} 0")) << text;
  // A second scrape does not count the same work twice.
  EXPECT_TRUE(HasLine(registry.Expose(), "kernelrl_policy_prompt_tokens_total{engine=\"cpu\"} 26"));
  metrics.reset();
  engine.reset();
  EXPECT_TRUE(HasLine(registry.Expose(), "kernelrl_policy_prompt_tokens_total{engine=\"cpu\"} 26"));
}

}  // namespace
}  // namespace kernelrl::learner
