// Prometheus metrics through prometheus-cpp: its registry holds the series and
// its text serializer writes the exposition (version 0.0.4); common/service.cc
// serves it on /metrics with cpp-httplib.
//
// What this layer adds to the library, and why:
//  - Label values by position (Labels({"Evaluate", "OK"})), as every caller
//    declares its label names once at registration.
//  - A cardinality cap: a family holds at most `max_series` label tuples;
//    further tuples all map to one series whose every label value is
//    "__overflow__", and kernelrl_metrics_overflow_total{family=...} counts the
//    folds (a label fed from task ids must not grow a scrape without bound).
//  - Collect hooks: owners refresh gauges computed on demand (uptime, queue
//    depth read from a core's Info()) just before each collection.
//  - A bad metric or label name is a programming error and aborts with a
//    message (the library throws).
//
// Thread-safe: registration and lookups take the registry/family mutex; series
// updates are the library's (lock-free counters and gauges). Series references
// stay valid for the registry's lifetime, so hot paths look a series up once.
// Exposition passes `promtool check metrics` (tests/promtool_test.sh).
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
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace kernelrl {

class Counter {
 public:
  using Library = prometheus::Counter;
  void Increment(double by = 1.0) { series_->Increment(by); }  // `by` < 0 is ignored: counters only go up.
  double Value() const { return series_->Value(); }

 private:
  template <typename>
  friend class Family;
  explicit Counter(Library* series) : series_(series) {}
  Library* series_;
};

class Gauge {
 public:
  using Library = prometheus::Gauge;
  void Set(double value) { series_->Set(value); }
  void Add(double by) { series_->Increment(by); }
  double Value() const { return series_->Value(); }

 private:
  template <typename>
  friend class Family;
  explicit Gauge(Library* series) : series_(series) {}
  Library* series_;
};

class Histogram {
 public:
  using Library = prometheus::Histogram;
  void Observe(double value) { series_->Observe(value); }

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Take() const;

 private:
  template <typename>
  friend class Family;
  explicit Histogram(Library* series) : series_(series) {}
  Library* series_;
};

// Exponential bucket bounds: start, start*factor, ... (count bounds).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

template <typename Series>
class Family;

// The registry; one per process is typical (see DefaultRegistry()). A
// prometheus::Collectable, so prometheus-cpp's pull exposer or push gateway
// could serve it as they are.
class MetricsRegistry : public prometheus::Collectable {
 public:
  explicit MetricsRegistry(int max_series_per_family = 1000);
  ~MetricsRegistry() override;

  Family<Counter>& AddCounter(const std::string& name, const std::string& help,
                              std::vector<std::string> label_names = {});
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help,
                          std::vector<std::string> label_names = {});
  Family<Histogram>& AddHistogram(const std::string& name, const std::string& help,
                                  std::vector<std::string> label_names, std::vector<double> bounds);

  // Runs before each collection (scrape or Expose()).
  void AddCollectHook(std::function<void()> hook);

  // The hooks' refresh, then every family's series.
  std::vector<prometheus::MetricFamily> Collect() const override;
  // Collect() in the text exposition format.
  std::string Expose() const;

  void set_max_series_per_family(int max_series);

 private:
  template <typename Series>
  friend class Family;
  struct Owned;
  template <typename Series, typename Builder>
  Family<Series>& Register(const std::string& name, const std::string& help, std::vector<std::string> label_names,
                           Builder builder, std::vector<double> bounds);

  prometheus::Registry registry_;
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<void>> families_ ABSL_GUARDED_BY(mu_);  // Our Family<T> wrappers.
  std::vector<std::function<void()>> hooks_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> max_series_;
  Family<Counter>* overflow_ = nullptr;  // kernelrl_metrics_overflow_total
};

// One metric family: name, help and label names; series by label values.
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
  Family(MetricsRegistry* registry, prometheus::Family<typename Series::Library>* family, std::string name,
         std::vector<std::string> label_names, std::vector<double> bounds)
      : registry_(registry), family_(family), name_(std::move(name)), label_names_(std::move(label_names)),
        bounds_(std::move(bounds)) {}

  MetricsRegistry* registry_;
  prometheus::Family<typename Series::Library>* family_;
  const std::string name_;
  const std::vector<std::string> label_names_;
  const std::vector<double> bounds_;  // Histograms only.
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Series>> series_ ABSL_GUARDED_BY(mu_);
};

bool IsValidMetricName(const std::string& name);
bool IsValidLabelName(const std::string& name);

// Process-wide registry used by the service runner and the services.
MetricsRegistry& DefaultRegistry();

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_METRICS_H_
