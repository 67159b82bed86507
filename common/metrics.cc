#include "common/metrics.h"

#include <cstdlib>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "prometheus/check_names.h"
#include "prometheus/text_serializer.h"

namespace kernelrl {

namespace {
constexpr char kOverflowValue[] = "__overflow__";

[[noreturn]] void Die(const std::string& message) {
  KLOG(ERROR) << "kernelrl metrics: " << message;
  std::abort();
}

void CheckNames(const std::string& name, const std::vector<std::string>& labels) {
  if (!IsValidMetricName(name)) Die(absl::StrCat("invalid metric name '", name, "'"));
  for (const auto& label : labels) {
    // "le" is the histogram bucket label; reserved in every family so a family can become a histogram.
    if (!IsValidLabelName(label) || label == "le") Die(absl::StrCat(name, ": invalid label name '", label, "'"));
  }
}

// prometheus-cpp 1.0.1 writes HELP text verbatim; the exposition format wants
// backslash and newline escaped there (label values it escapes itself).
std::string EscapeHelp(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

template <typename Library>
Library& AddSeries(prometheus::Family<Library>* family, const prometheus::Labels& labels,
                   const std::vector<double>& bounds) {
  if constexpr (std::is_same_v<Library, prometheus::Histogram>) {
    return family->Add(labels, prometheus::Histogram::BucketBoundaries(bounds));
  } else {
    (void)bounds;
    return family->Add(labels);
  }
}
}  // namespace

Histogram::Snapshot Histogram::Take() const {
  const prometheus::ClientMetric m = series_->Collect();
  Snapshot snap;
  for (const prometheus::ClientMetric::Bucket& b : m.histogram.bucket) {
    if (b.upper_bound != std::numeric_limits<double>::infinity()) snap.bounds.push_back(b.upper_bound);
    snap.cumulative.push_back(b.cumulative_count);
  }
  snap.count = m.histogram.sample_count;
  snap.sum = m.histogram.sample_sum;
  return snap;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> bounds;
  for (int i = 0; i < count; ++i, start *= factor) bounds.push_back(start);
  return bounds;
}

template <typename Series>
Series& Family<Series>::Labels(const std::vector<std::string>& values) {
  if (values.size() != label_names_.size()) {
    Die(absl::StrCat(name_, ": expected ", label_names_.size(), " label values, got ", values.size()));
  }
  bool folded = false;
  Series* series = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = series_.find(values);
    if (it != series_.end()) return *it->second;
    const bool full = static_cast<int>(series_.size()) >= registry_->max_series_.load();
    std::vector<std::string> key = values;
    if (full && !values.empty()) {
      key.assign(values.size(), kOverflowValue);
      folded = true;
    }
    auto& slot = series_[key];
    if (!slot) {
      prometheus::Labels labels;
      for (size_t i = 0; i < key.size(); ++i) labels[label_names_[i]] = key[i];
      slot.reset(new Series(&AddSeries(family_, labels, bounds_)));
    }
    series = slot.get();
  }
  if (folded && registry_->overflow_ != nullptr &&
      static_cast<void*>(this) != static_cast<void*>(registry_->overflow_)) {
    registry_->overflow_->Labels({name_}).Increment();
  }
  return *series;
}

MetricsRegistry::MetricsRegistry(int max_series_per_family)
    : registry_(prometheus::Registry::InsertBehavior::Throw), max_series_(max_series_per_family) {
  overflow_ = &AddCounter("kernelrl_metrics_overflow_total",
                          "Label sets folded into the __overflow__ series because a family hit its cardinality cap.",
                          {"family"});
}

MetricsRegistry::~MetricsRegistry() = default;

void MetricsRegistry::set_max_series_per_family(int max_series) { max_series_ = max_series; }

template <typename Series, typename Builder>
Family<Series>& MetricsRegistry::Register(const std::string& name, const std::string& help,
                                         std::vector<std::string> label_names, Builder builder,
                                         std::vector<double> bounds) {
  CheckNames(name, label_names);
  absl::MutexLock lock(&mu_);
  prometheus::Family<typename Series::Library>* library = nullptr;
  try {
    library = &builder.Name(name).Help(EscapeHelp(help)).Register(registry_);
  } catch (const std::exception& e) {
    Die(absl::StrCat("metric '", name, "': ", e.what()));  // Registered twice, or as another type.
  }
  auto family = std::shared_ptr<Family<Series>>(
      new Family<Series>(this, library, name, std::move(label_names), std::move(bounds)));
  families_.push_back(family);
  return *family;
}

Family<Counter>& MetricsRegistry::AddCounter(const std::string& name, const std::string& help,
                                             std::vector<std::string> label_names) {
  return Register<Counter>(name, help, std::move(label_names), prometheus::BuildCounter(), {});
}

Family<Gauge>& MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                                         std::vector<std::string> label_names) {
  return Register<Gauge>(name, help, std::move(label_names), prometheus::BuildGauge(), {});
}

Family<Histogram>& MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                                 std::vector<std::string> label_names,
                                                 std::vector<double> bounds) {
  for (size_t i = 1; i < bounds.size(); ++i) {
    if (!(bounds[i] > bounds[i - 1])) Die(absl::StrCat(name, ": histogram bounds must be strictly increasing"));
  }
  return Register<Histogram>(name, help, std::move(label_names), prometheus::BuildHistogram(), std::move(bounds));
}

void MetricsRegistry::AddCollectHook(std::function<void()> hook) {
  absl::MutexLock lock(&mu_);
  hooks_.push_back(std::move(hook));
}

std::vector<prometheus::MetricFamily> MetricsRegistry::Collect() const {
  std::vector<std::function<void()>> hooks;
  {
    absl::MutexLock lock(&mu_);
    hooks = hooks_;
  }
  for (const auto& hook : hooks) hook();  // Outside mu_: hooks may touch families.
  return registry_.Collect();
}

std::string MetricsRegistry::Expose() const { return prometheus::TextSerializer().Serialize(Collect()); }

bool IsValidMetricName(const std::string& name) { return prometheus::CheckMetricName(name); }

bool IsValidLabelName(const std::string& name) { return prometheus::CheckLabelName(name); }

MetricsRegistry& DefaultRegistry() {
  static MetricsRegistry* registry = new MetricsRegistry();
  return *registry;
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

}  // namespace kernelrl
