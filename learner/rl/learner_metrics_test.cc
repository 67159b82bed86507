#include "learner/rl/learner_metrics.h"

#include <cmath>
#include <cstdlib>
#include <random>

#include "gtest/gtest.h"

namespace kernelrl::learner::rl {
namespace {

v1::PushTrajectoriesAck Ack(bool accepted, const std::string& reason) {
  v1::PushTrajectoriesAck a;
  a.set_accepted(accepted);
  a.set_reason(reason);
  return a;
}

bool Has(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

// The value of the series exactly named `series` ("name" or "name{labels}"), NaN if absent.
double ValueOf(const std::string& text, const std::string& series) {
  const std::string needle = "\n" + series + " ";
  const size_t at = text.find(needle);
  if (at == std::string::npos) return std::nan("");
  return std::strtod(text.c_str() + at + needle.size(), nullptr);
}

TEST(LearnerMetricsTest, PushResultsFromIngestAcks) {
  EXPECT_EQ(LearnerMetrics::PushResult(Ack(true, "")), "accepted");
  EXPECT_EQ(LearnerMetrics::PushResult(Ack(true, "duplicate: already accepted")), "duplicate");
  EXPECT_EQ(LearnerMetrics::PushResult(Ack(false, "stale policy version 1 (current 5, max lag 1)")), "stale");
  EXPECT_EQ(LearnerMetrics::PushResult(Ack(false, "infra error: the task is issued again")), "infra_error");
  EXPECT_EQ(LearnerMetrics::PushResult(Ack(false, "buffer full: retry later")), "buffer_full");
  EXPECT_EQ(LearnerMetrics::PushResult(Ack(false, "unknown or expired lease")), "rejected");
}

TEST(LearnerMetricsTest, PushesStepsAndLiveGaugesInTheScrape) {
  MetricsRegistry registry;
  LearnerMetrics metrics(&registry);
  std::mt19937 rng(std::random_device{}());
  const int accepted = 1 + static_cast<int>(rng() % 9);
  for (int i = 0; i < accepted; ++i) metrics.RecordPush(Ack(true, ""), i % 3);
  metrics.RecordPush(Ack(false, "stale policy version 0 (current 9, max lag 1)"), 9);
  metrics.RecordPush(Ack(false, "unknown or expired lease"), 2);  // Not observed: never buffered.
  const double entropy = 0.5 + (rng() % 100) / 100.0, tps = 100 + rng() % 1000, flops = 1e9 * (1 + rng() % 50);
  metrics.RecordStep({{"entropy", entropy}, {"tokens_per_second", tps}, {"train_flops", flops},
                      {"step_seconds", 2.0}, {"is_weight_mean", 1.1}, {"is_weight_max", 1.9},
                      {"is_weight_min", 0.4}, {"clip_frac", 0.25}, {"reward_mean", 0.5}, {"tokens", 512},
                      {"trajectories", 4}, {"policy_loss", -0.1}, {"actor_grad_norm", 0.7}},
                     {-1, 1, 2, 3}, 7, 1e12);
  bool live_called = false;
  metrics.SetLiveSource([&] {
    live_called = true;
    LearnerMetrics::Live l;
    l.jobs_by_state = {{"RUNNING", 1}, {"SUCCEEDED", 2}};
    l.paused_jobs = 1;
    l.has_ingest = true;
    l.buffer_depth = 5;
    return l;
  });
  std::string text = registry.Expose();
  EXPECT_TRUE(live_called);
  EXPECT_TRUE(Has(text, "kernelrl_learner_trajectories_total{result=\"accepted\"} " + std::to_string(accepted)))
      << text;
  EXPECT_TRUE(Has(text, "kernelrl_learner_trajectories_total{result=\"stale\"} 1"));
  EXPECT_TRUE(Has(text, "kernelrl_learner_trajectories_total{result=\"rejected\"} 1"));
  EXPECT_TRUE(Has(text, "kernelrl_learner_trajectory_staleness_versions_count " + std::to_string(accepted + 1)));
  EXPECT_TRUE(Has(text, "kernelrl_learner_trajectory_staleness_versions_bucket{le=\"8\"} " + std::to_string(accepted)));
  EXPECT_TRUE(Has(text, "kernelrl_learner_ppo_steps_total 1"));
  EXPECT_TRUE(Has(text, "kernelrl_learner_policy_version 7"));
  EXPECT_DOUBLE_EQ(ValueOf(text, "kernelrl_learner_entropy"), entropy);
  EXPECT_DOUBLE_EQ(ValueOf(text, "kernelrl_learner_mfu"), flops / 2.0 / 1e12);
  EXPECT_TRUE(Has(text, "kernelrl_learner_is_ratio{stat=\"min\"} 0.4"));
  EXPECT_TRUE(Has(text, "kernelrl_learner_reward_count 4"));
  EXPECT_TRUE(Has(text, "kernelrl_learner_reward_bucket{le=\"-1\"} 1"));
  EXPECT_TRUE(Has(text, "kernelrl_learner_jobs{state=\"SUCCEEDED\"} 2"));
  EXPECT_TRUE(Has(text, "kernelrl_learner_jobs_paused 1"));
  EXPECT_TRUE(Has(text, "kernelrl_learner_buffer_depth 5"));
  // A state no job is in any more reads 0; without an ingest the buffer reads 0.
  metrics.SetLiveSource([] {
    LearnerMetrics::Live l;
    l.jobs_by_state = {{"SUCCEEDED", 3}};
    return l;
  });
  text = registry.Expose();
  EXPECT_TRUE(Has(text, "kernelrl_learner_jobs{state=\"RUNNING\"} 0"));
  EXPECT_TRUE(Has(text, "kernelrl_learner_jobs{state=\"CANCELLED\"} 0"));
  EXPECT_TRUE(Has(text, "kernelrl_learner_buffer_depth 0"));
}

}  // namespace
}  // namespace kernelrl::learner::rl
