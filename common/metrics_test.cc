#include "common/metrics.h"

#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kernelrl {
namespace {

bool Contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

TEST(MetricsTest, CounterAndGaugeExposition) {
  MetricsRegistry registry;
  auto& requests = registry.AddCounter("kr_requests_total", "Requests handled.", {"method", "code"});
  requests.Labels({"Evaluate", "OK"}).Increment(3);
  requests.Labels({"Evaluate", "OK"}).Increment(-5);  // ignored: counters only go up
  auto& depth = registry.AddGauge("kr_queue_depth", "Queued jobs.");
  depth.Get().Set(7.25);
  depth.Get().Add(-0.25);
  const std::string text = registry.Expose();
  EXPECT_TRUE(Contains(text, "# HELP kr_requests_total Requests handled.\n# TYPE kr_requests_total counter\n"));
  EXPECT_TRUE(Contains(text, "kr_requests_total{code=\"OK\",method=\"Evaluate\"} 3\n")) << text;  // Labels sorted.
  EXPECT_TRUE(Contains(text, "# TYPE kr_queue_depth gauge\nkr_queue_depth 7\n")) << text;
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  MetricsRegistry registry;
  auto& latency = registry.AddHistogram("kr_latency_seconds", "Latency.", {"stage"}, {0.1, 1, 10});
  Histogram& h = latency.Labels({"compile"});
  std::mt19937 rng(12345);
  std::uniform_real_distribution<double> dist(0, 20);
  std::vector<double> values(200);
  double sum = 0;
  for (double& v : values) sum += (v = dist(rng));
  for (double v : values) h.Observe(v);
  const Histogram::Snapshot snap = h.Take();
  ASSERT_EQ(snap.cumulative.size(), 4u);
  for (size_t b = 0; b < 3; ++b) {
    const auto expected = std::count_if(values.begin(), values.end(), [&](double v) { return v <= snap.bounds[b]; });
    EXPECT_EQ(snap.cumulative[b], static_cast<uint64_t>(expected)) << "bucket " << b;
  }
  EXPECT_EQ(snap.cumulative[3], 200u);
  EXPECT_EQ(snap.count, 200u);
  EXPECT_NEAR(snap.sum, sum, 1e-9);
  const std::string text = registry.Expose();
  EXPECT_TRUE(Contains(text, "kr_latency_seconds_bucket{stage=\"compile\",le=\"+Inf\"} 200\n")) << text;
  EXPECT_TRUE(Contains(text, "kr_latency_seconds_count{stage=\"compile\"} 200\n"));
}

// Escaping is the library's; this checks it reaches the exposition.
TEST(MetricsTest, EscapesHelpAndLabelValues) {
  MetricsRegistry registry;
  registry.AddCounter("kr_odd_total", "Line one\nline two \\ done", {"path"}).Labels({"C:\\tmp\n\"x\""}).Increment();
  const std::string text = registry.Expose();
  EXPECT_TRUE(Contains(text, "# HELP kr_odd_total Line one\\nline two \\\\ done\n")) << text;
  EXPECT_TRUE(Contains(text, "kr_odd_total{path=\"C:\\\\tmp\\n\\\"x\\\"\"} 1\n")) << text;
}

TEST(MetricsTest, ValidatesNames) {
  EXPECT_TRUE(IsValidMetricName("kernelrl_sandbox:verdicts_total"));
  EXPECT_FALSE(IsValidMetricName("9lives"));
  EXPECT_FALSE(IsValidMetricName("has-dash"));
  EXPECT_TRUE(IsValidLabelName("outcome"));
  EXPECT_FALSE(IsValidLabelName("__reserved"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  MetricsRegistry registry;
  EXPECT_DEATH(registry.AddCounter("bad-name", "x"), "invalid metric name");
  EXPECT_DEATH(registry.AddGauge("kr_g", "x", {"le"}), "invalid label name");
  registry.AddGauge("kr_twice", "x");
  EXPECT_DEATH(registry.AddCounter("kr_twice", "x"), "kr_twice");
}

TEST(MetricsTest, CardinalityCapFoldsIntoOverflowSeries) {
  MetricsRegistry registry(/*max_series_per_family=*/3);
  auto& family = registry.AddCounter("kr_by_task_total", "Per task.", {"task"});
  for (int i = 0; i < 10; ++i) family.Labels({"task" + std::to_string(i)}).Increment();
  const std::string text = registry.Expose();
  EXPECT_TRUE(Contains(text, "kr_by_task_total{task=\"task0\"} 1\n"));
  EXPECT_TRUE(Contains(text, "kr_by_task_total{task=\"task2\"} 1\n"));
  EXPECT_FALSE(Contains(text, "task=\"task3\""));
  EXPECT_TRUE(Contains(text, "kr_by_task_total{task=\"__overflow__\"} 7\n")) << text;
  EXPECT_TRUE(Contains(text, "kernelrl_metrics_overflow_total{family=\"kr_by_task_total\"} 7\n")) << text;
}

TEST(MetricsTest, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry registry;
  auto& counter = registry.AddCounter("kr_hits_total", "Hits.", {"worker"});
  auto& hist = registry.AddHistogram("kr_obs", "Observations.", {}, {1, 2});
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10000; ++i) {
        counter.Labels({"w" + std::to_string(i % 4)}).Increment();
        hist.Get().Observe(t % 3);
      }
    });
  }
  std::thread scraper([&] {
    for (int i = 0; i < 50; ++i) registry.Expose();
  });
  for (auto& t : threads) t.join();
  scraper.join();
  double total = 0;
  for (int w = 0; w < 4; ++w) total += counter.Labels({"w" + std::to_string(w)}).Value();
  EXPECT_EQ(total, 80000);
  EXPECT_EQ(hist.Get().Take().count, 80000u);
}

TEST(MetricsTest, CollectHooksRunBeforeExposition) {
  MetricsRegistry registry;
  Gauge& g = registry.AddGauge("kr_computed", "Computed on scrape.").Get();
  int calls = 0;
  registry.AddCollectHook([&] { g.Set(++calls * 10); });
  registry.Expose();
  EXPECT_TRUE(Contains(registry.Expose(), "kr_computed 20\n"));
}

}  // namespace
}  // namespace kernelrl
