// Prints an exposition that exercises every feature of common/metrics: all
// three types, labels needing escapes, special values, a folded overflow
// series. promtool_test.sh checks it with `promtool check metrics`.
#include <cmath>
#include <iostream>

#include "common/metrics.h"

int main() {
  kernelrl::MetricsRegistry registry(/*max_series_per_family=*/4);
  auto& verdicts = registry.AddCounter("kernelrl_fixture_verdicts_total",
                                       "Verdicts by outcome.\nSecond line with a \\ backslash.", {"outcome", "task"});
  verdicts.Labels({"ok", "level1/19_ReLU"}).Increment(12);
  verdicts.Labels({"wrong_answer", "path \"quoted\"\nnewline \\ slash"}).Increment(2.5);
  for (int i = 0; i < 10; ++i) verdicts.Labels({"timeout", "t" + std::to_string(i)}).Increment();
  auto& gauge = registry.AddGauge("kernelrl_fixture_temperature_celsius", "A gauge with special values.", {"kind"});
  gauge.Labels({"nan"}).Set(std::nan(""));
  gauge.Labels({"inf"}).Set(INFINITY);
  gauge.Labels({"neg"}).Set(-1.5e-9);
  auto& latency = registry.AddHistogram("kernelrl_fixture_stage_seconds", "Stage latency.", {"stage"},
                                        kernelrl::ExponentialBuckets(0.001, 10, 5));
  for (double v : {0.0005, 0.02, 0.3, 4.0, 99.0}) latency.Labels({"compile"}).Observe(v);
  latency.Labels({"verify"}).Observe(0.7);
  registry.AddGauge("kernelrl_fixture_empty", "A family with no series yet.");
  std::cout << registry.Expose();
  return 0;
}
