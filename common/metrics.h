// Prometheus metrics in the text exposition format (version 0.0.4).
//
// A MetricsRegistry owns metric families (counter, gauge, histogram), each with
// a fixed list of label names. A family hands out one series per label-value
// tuple; series pointers stay valid for the registry's lifetime, so hot paths
// look a series up once and then only touch atomics.
//
// Guarantees:
//  - Thread-safe: registration and lookups take the registry/family mutex;
//    updates to a series are lock-free (counters, gauges) or per-series locked
//    (histograms).
//  - Names are validated at registration (a bad name is a programming error and
//    aborts with a message); HELP text and label values are escaped.
//  - Cardinality cap: a family holds at most `max_series` label tuples; further
//    tuples all map to one series whose every label value is "__overflow__",
//    and kernelrl_metrics_overflow_total{family=...} counts the folds.
//
// Exposition passes `promtool check metrics` (tested in tests/promtool_test.sh).
#ifndef KERNELRL_COMMON_METRICS_H_
#define KERNELRL_COMMON_METRICS_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kernelrl {

class Counter {
 public:
  void Increment(double by = 1.0);  // `by` < 0 is ignored: counters only go up.
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double by);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // `bounds` are the upper bounds of the finite buckets, strictly increasing.
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Take() const;

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // per bucket, +Inf last
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
};

// Exponential bucket bounds: start, start*factor, ... (count bounds).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

template <typename Series>
class Family;

// The registry; one per process is typical (see DefaultRegistry()).
class MetricsRegistry {
 public:
  explicit MetricsRegistry(int max_series_per_family = 1000);
  ~MetricsRegistry();

  Family<Counter>& AddCounter(const std::string& name, const std::string& help,
                              std::vector<std::string> label_names = {});
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help,
                          std::vector<std::string> label_names = {});
  Family<Histogram>& AddHistogram(const std::string& name, const std::string& help,
                                  std::vector<std::string> label_names, std::vector<double> bounds);

  // Runs before each exposition: lets owners refresh gauges computed on demand
  // (uptime, queue depth read from a core's Info()).
  void AddCollectHook(std::function<void()> hook);

  // The full text exposition, families in registration order.
  std::string Expose() const;

  void set_max_series_per_family(int max_series);

 private:
  struct FamilyBase;
  template <typename Series>
  friend class Family;
  template <typename Series>
  Family<Series>& Register(const std::string& name, const std::string& help, const char* type,
                           std::vector<std::string> label_names,
                           std::function<std::unique_ptr<Series>()> make);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<FamilyBase>> families_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> hooks_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> max_series_;
  Family<Counter>* overflow_ = nullptr;  // kernelrl_metrics_overflow_total
};

// One metric family: name, help, type and label names; series by label values.
template <typename Series>
class Family {
 public:
  // The series for these label values (created on first use). The number of
  // values must equal the number of label names (programming error otherwise).
  Series& Labels(const std::vector<std::string>& values);
  // The series of a family without labels.
  Series& Get() { return Labels({}); }

 private:
  friend class MetricsRegistry;
  Family(MetricsRegistry* registry, std::string name, std::vector<std::string> label_names,
         std::function<std::unique_ptr<Series>()> make)
      : registry_(registry), name_(std::move(name)), label_names_(std::move(label_names)),
        make_(std::move(make)) {}

  MetricsRegistry* registry_;
  const std::string name_;
  const std::vector<std::string> label_names_;
  std::function<std::unique_ptr<Series>()> make_;
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Series>> series_ ABSL_GUARDED_BY(mu_);
};

// Escaping per the exposition format (exposed for tests).
std::string EscapeHelp(const std::string& text);        // \\ and \n
std::string EscapeLabelValue(const std::string& text);  // \\, \" and \n
std::string FormatMetricValue(double value);            // +Inf, -Inf, NaN, shortest round-trip
bool IsValidMetricName(const std::string& name);
bool IsValidLabelName(const std::string& name);

// Process-wide registry used by the service runner and the services.
MetricsRegistry& DefaultRegistry();

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_METRICS_H_
