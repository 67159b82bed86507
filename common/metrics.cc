#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"

namespace kernelrl {

namespace {
constexpr char kOverflowValue[] = "__overflow__";

void AtomicAdd(std::atomic<double>& target, double by) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + by, std::memory_order_relaxed)) {
  }
}

[[noreturn]] void Die(const std::string& message) {
  KLOG(ERROR) << "kernelrl metrics: " << message;
  std::abort();
}

std::string LabelBlock(const std::vector<std::string>& names, const std::vector<std::string>& values,
                       const std::string& extra_name = "", const std::string& extra_value = "") {
  std::vector<std::string> parts;
  for (size_t i = 0; i < names.size(); ++i) {
    parts.push_back(absl::StrCat(names[i], "=\"", EscapeLabelValue(values[i]), "\""));
  }
  if (!extra_name.empty()) parts.push_back(absl::StrCat(extra_name, "=\"", extra_value, "\""));
  if (parts.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < parts.size(); ++i) absl::StrAppend(&out, i ? "," : "", parts[i]);
  return out + "}";
}
}  // namespace

void Counter::Increment(double by) {
  if (!(by > 0)) return;
  AtomicAdd(value_, by);
}

void Gauge::Add(double by) { AtomicAdd(value_, by); }

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  for (size_t i = 1; i < bounds_.size(); ++i) {
    if (!(bounds_[i] > bounds_[i - 1])) Die("histogram bounds must be strictly increasing");
  }
  absl::MutexLock lock(&mu_);
  counts_.assign(bounds_.size() + 1, 0);
}

void Histogram::Observe(double value) {
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  absl::MutexLock lock(&mu_);
  ++counts_[bucket];
  sum_ += value;
}

Histogram::Snapshot Histogram::Take() const {
  Snapshot snap;
  snap.bounds = bounds_;
  absl::MutexLock lock(&mu_);
  uint64_t running = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    running += counts_[i];
    snap.cumulative.push_back(running);
  }
  snap.count = running;
  snap.sum = sum_;
  return snap;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> bounds;
  for (int i = 0; i < count; ++i, start *= factor) bounds.push_back(start);
  return bounds;
}

// Type-erased view of a family for exposition.
struct MetricsRegistry::FamilyBase {
  std::string name, help, type;
  std::function<void(std::string*)> write_samples;
  std::shared_ptr<void> family;  // Owns the Family<T>.
};

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
    if (!slot) slot = make_();
    series = slot.get();
  }
  if (folded && registry_->overflow_ != nullptr &&
      static_cast<void*>(this) != static_cast<void*>(registry_->overflow_)) {
    registry_->overflow_->Labels({name_}).Increment();
  }
  return *series;
}

MetricsRegistry::MetricsRegistry(int max_series_per_family) : max_series_(max_series_per_family) {
  overflow_ = &AddCounter("kernelrl_metrics_overflow_total",
                          "Label sets folded into the __overflow__ series because a family hit its cardinality cap.",
                          {"family"});
}

MetricsRegistry::~MetricsRegistry() = default;

void MetricsRegistry::set_max_series_per_family(int max_series) { max_series_ = max_series; }

namespace {
void CheckNames(const std::string& name, const std::vector<std::string>& labels) {
  if (!IsValidMetricName(name)) Die(absl::StrCat("invalid metric name '", name, "'"));
  for (const auto& label : labels) {
    if (!IsValidLabelName(label) || label == "le") {
      Die(absl::StrCat(name, ": invalid label name '", label, "'"));
    }
  }
}

template <typename Scalar>
void WriteSeries(const std::string& name, const std::vector<std::string>& label_names,
                 const std::vector<std::string>& values, const Scalar& series, std::string* out) {
  absl::StrAppend(out, name, LabelBlock(label_names, values), " ", FormatMetricValue(series.Value()), "\n");
}

void WriteSeries(const std::string& name, const std::vector<std::string>& label_names,
                 const std::vector<std::string>& values, const Histogram& series, std::string* out) {
  const Histogram::Snapshot snap = series.Take();
  for (size_t i = 0; i < snap.cumulative.size(); ++i) {
    const std::string le = i < snap.bounds.size() ? FormatMetricValue(snap.bounds[i]) : "+Inf";
    absl::StrAppend(out, name, "_bucket", LabelBlock(label_names, values, "le", le), " ", snap.cumulative[i],
                    "\n");
  }
  const std::string labels = LabelBlock(label_names, values);
  absl::StrAppend(out, name, "_sum", labels, " ", FormatMetricValue(snap.sum), "\n");
  absl::StrAppend(out, name, "_count", labels, " ", snap.count, "\n");
}
}  // namespace

template <typename Series>
Family<Series>& MetricsRegistry::Register(const std::string& name, const std::string& help,
                                         const char* type, std::vector<std::string> label_names,
                                         std::function<std::unique_ptr<Series>()> make) {
  CheckNames(name, label_names);
  auto family = std::shared_ptr<Family<Series>>(new Family<Series>(this, name, label_names, std::move(make)));
  Family<Series>* raw = family.get();
  auto base = std::make_unique<FamilyBase>();
  base->name = name;
  base->help = help;
  base->type = type;
  base->write_samples = [raw](std::string* out) {
    absl::MutexLock lock(&raw->mu_);
    for (const auto& [values, series] : raw->series_) {
      WriteSeries(raw->name_, raw->label_names_, values, *series, out);
    }
  };
  base->family = family;
  absl::MutexLock lock(&mu_);
  for (const auto& f : families_) {
    if (f->name == name) Die(absl::StrCat("metric '", name, "' registered twice"));
  }
  families_.push_back(std::move(base));
  return *raw;
}

Family<Counter>& MetricsRegistry::AddCounter(const std::string& name, const std::string& help,
                                             std::vector<std::string> label_names) {
  return Register<Counter>(name, help, "counter", std::move(label_names),
                           [] { return std::make_unique<Counter>(); });
}

Family<Gauge>& MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                                         std::vector<std::string> label_names) {
  return Register<Gauge>(name, help, "gauge", std::move(label_names), [] { return std::make_unique<Gauge>(); });
}

Family<Histogram>& MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                                 std::vector<std::string> label_names,
                                                 std::vector<double> bounds) {
  return Register<Histogram>(name, help, "histogram", std::move(label_names),
                             [bounds] { return std::make_unique<Histogram>(bounds); });
}

void MetricsRegistry::AddCollectHook(std::function<void()> hook) {
  absl::MutexLock lock(&mu_);
  hooks_.push_back(std::move(hook));
}

std::string MetricsRegistry::Expose() const {
  std::vector<std::function<void()>> hooks;
  {
    absl::MutexLock lock(&mu_);
    hooks = hooks_;
  }
  for (const auto& hook : hooks) hook();  // Outside mu_: hooks may touch families.
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& family : families_) {
    absl::StrAppend(&out, "# HELP ", family->name, " ", EscapeHelp(family->help), "\n");
    absl::StrAppend(&out, "# TYPE ", family->name, " ", family->type, "\n");
    family->write_samples(&out);
  }
  return out;
}

std::string EscapeHelp(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string EscapeLabelValue(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) return absl::StrFormat("%.0f", value);
  // Shortest representation that round-trips.
  for (int precision = 6; precision <= 17; ++precision) {
    std::string text = absl::StrFormat("%.*g", precision, value);
    if (std::strtod(text.c_str(), nullptr) == value) return text;
  }
  return absl::StrFormat("%.17g", value);
}

bool IsValidMetricName(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool IsValidLabelName(const std::string& name) {
  if (name.empty() || name.rfind("__", 0) == 0) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

MetricsRegistry& DefaultRegistry() {
  static MetricsRegistry* registry = new MetricsRegistry();
  return *registry;
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

}  // namespace kernelrl
