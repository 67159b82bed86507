#include "sandbox/verdict_cache.h"

#include <algorithm>
#include <set>

#include "common/sha256.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace kernelrl::sandbox {
namespace {

constexpr int kDefaultMaxUses = 16;
constexpr int kMinConfirmations = 2;  // one lucky verdict is never replayed

// Map fields (Task.metadata) serialize in a fixed order only when asked to.
void AppendDeterministic(const google::protobuf::MessageLite& m, std::string* out) {
  google::protobuf::io::StringOutputStream stream(out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  m.SerializeToCodedStream(&coded);
}

// `worst` takes the less favourable figure of each pair; reward and outcome
// are equal (the verdicts agree).
void KeepWorst(v1::Verdict& worst, const v1::Verdict& fresh) {
  worst.set_speedup_vs_eager(std::min(worst.speedup_vs_eager(), fresh.speedup_vs_eager()));
  worst.set_speedup_vs_compile(std::min(worst.speedup_vs_compile(), fresh.speedup_vs_compile()));
  worst.set_candidate_time_us(std::max(worst.candidate_time_us(), fresh.candidate_time_us()));
  worst.set_candidate_graph_time_us(std::max(worst.candidate_graph_time_us(), fresh.candidate_graph_time_us()));
  worst.set_speed_of_light_ratio(std::max(worst.speed_of_light_ratio(), fresh.speed_of_light_ratio()));
  std::set<std::string> have(worst.flags().begin(), worst.flags().end());
  for (const std::string& f : fresh.flags()) {
    if (have.insert(f).second) worst.add_flags(f);
  }
}

}  // namespace

VerdictCache::VerdictCache(const v1::VerdictCacheConfig& config)
    : max_entries_(config.max_entries() > 0 ? config.max_entries() : 0),
      max_uses_(config.max_uses() > 0 ? config.max_uses() : kDefaultMaxUses),
      min_confirmations_(std::max(kMinConfirmations, config.min_confirmations())) {}

std::string VerdictCache::Key(const v1::EvaluateRequest& request) {
  std::string task, workspace;
  AppendDeterministic(request.task(), &task);
  AppendDeterministic(request.workspace(), &workspace);
  // Lengths first: no two (task, workspace) pairs share a byte string.
  return Sha256Hex(std::to_string(task.size()) + ":" + task + std::to_string(workspace.size()) + ":" + workspace +
                   (request.skip_profile() ? "1" : "0"));
}

bool VerdictCache::Servable(v1::Verdict::Outcome outcome) {
  switch (outcome) {
    case v1::Verdict::OK:
    case v1::Verdict::COMPILE_ERROR:
    case v1::Verdict::WRONG_ANSWER:
    case v1::Verdict::SANDBOX_VIOLATION:
    case v1::Verdict::BAD_WORKSPACE:
      return true;
    default:
      return false;
  }
}

bool VerdictCache::Agree(const v1::Verdict& a, const v1::Verdict& b) {
  return a.outcome() == b.outcome() && a.reward() == b.reward() && a.quarantined() == b.quarantined();
}

std::optional<v1::Verdict> VerdictCache::Lookup(const std::string& key) {
  if (!enabled()) return std::nullopt;
  absl::MutexLock l(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || poisoned_.count(key) || !Servable(it->second.worst.outcome()) ||
      it->second.since_spent < min_confirmations_) {
    ++misses_;
    return std::nullopt;
  }
  Entry& e = it->second;
  v1::Verdict v = e.worst;
  v.set_cached(true);
  if (++e.uses >= max_uses_) {  // Spent: identical requests are judged afresh until re-confirmed.
    e.uses = 0;
    e.since_spent = 0;
  }
  ++hits_;
  return v;
}

void VerdictCache::Record(const std::string& key, const v1::Verdict& fresh) {
  if (!enabled() || fresh.cached() || fresh.outcome() == v1::Verdict::INFRA_ERROR) return;
  absl::MutexLock l(&mu_);
  if (auto p = poisoned_.find(key); p != poisoned_.end()) {  // stays poisoned; refresh its place
    poisoned_order_.splice(poisoned_order_.end(), poisoned_order_, p->second);
    return;
  }
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    Entry& e = it->second;
    if (!Agree(e.worst, fresh)) {
      Poison(key);
      return;
    }
    KeepWorst(e.worst, fresh);
    ++e.fresh;
    ++e.since_spent;
    order_.splice(order_.end(), order_, e.order);
    return;
  }
  while (static_cast<int>(entries_.size()) >= max_entries_) {
    entries_.erase(order_.front());
    order_.pop_front();
  }
  order_.push_back(key);
  Entry e;
  e.worst = fresh;
  e.worst.clear_stages();  // the serving request's own stages replace them
  e.fresh = e.since_spent = 1;
  e.order = std::prev(order_.end());
  entries_.emplace(key, std::move(e));
}

void VerdictCache::Poison(const std::string& key) {
  if (auto it = entries_.find(key); it != entries_.end()) {
    order_.erase(it->second.order);
    entries_.erase(it);
  }
  while (static_cast<int>(poisoned_.size()) >= max_entries_) {
    poisoned_.erase(poisoned_order_.front());
    poisoned_order_.pop_front();
  }
  poisoned_order_.push_back(key);
  poisoned_[key] = std::prev(poisoned_order_.end());
}

VerdictCache::Stats VerdictCache::stats() const {
  absl::MutexLock l(&mu_);
  return Stats{hits_, misses_, static_cast<int64_t>(entries_.size()), static_cast<int64_t>(poisoned_.size())};
}

}  // namespace kernelrl::sandbox
