#include "sandbox/verdict_cache.h"

#include "common/sha256.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace kernelrl::sandbox {
namespace {

constexpr int kDefaultMaxUses = 16;

// Map fields (Task.metadata) serialize in a fixed order only when asked to.
void AppendDeterministic(const google::protobuf::MessageLite& m, std::string* out) {
  google::protobuf::io::StringOutputStream stream(out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  m.SerializeToCodedStream(&coded);
}

}  // namespace

VerdictCache::VerdictCache(const v1::VerdictCacheConfig& config)
    : max_entries_(config.max_entries() > 0 ? config.max_entries() : 0),
      max_uses_(config.max_uses() > 0 ? config.max_uses() : kDefaultMaxUses) {}

std::string VerdictCache::Key(const v1::EvaluateRequest& request) {
  std::string task, workspace;
  AppendDeterministic(request.task(), &task);
  AppendDeterministic(request.workspace(), &workspace);
  // Lengths first: no two (task, workspace) pairs share a byte string.
  return Sha256Hex(std::to_string(task.size()) + ":" + task + std::to_string(workspace.size()) + ":" + workspace +
                   (request.skip_profile() ? "1" : "0"));
}

bool VerdictCache::Cacheable(const v1::Verdict& v) {
  switch (v.outcome()) {
    case v1::Verdict::OK:
    case v1::Verdict::COMPILE_ERROR:
    case v1::Verdict::WRONG_ANSWER:
    case v1::Verdict::SANDBOX_VIOLATION:
    case v1::Verdict::BAD_WORKSPACE:
      return !v.cached();
    default:
      return false;
  }
}

std::optional<v1::Verdict> VerdictCache::Lookup(const std::string& key) {
  if (!enabled()) return std::nullopt;
  absl::MutexLock l(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    ++misses_;
    return std::nullopt;
  }
  v1::Verdict v = it->second.verdict;
  v.set_cached(true);
  if (++it->second.uses >= max_uses_) {  // Its last use: the next identical request is judged afresh.
    order_.erase(it->second.order);
    entries_.erase(it);
  }
  ++hits_;
  return v;
}

void VerdictCache::Store(const std::string& key, const v1::Verdict& verdict) {
  if (!enabled() || !Cacheable(verdict)) return;
  absl::MutexLock l(&mu_);
  if (entries_.count(key)) return;  // A concurrent twin stored first.
  while (static_cast<int>(entries_.size()) >= max_entries_) {
    entries_.erase(order_.front());
    order_.pop_front();
  }
  order_.push_back(key);
  entries_[key] = Entry{verdict, 0, std::prev(order_.end())};
}

VerdictCache::Stats VerdictCache::stats() const {
  absl::MutexLock l(&mu_);
  return Stats{hits_, misses_, static_cast<int64_t>(entries_.size())};
}

}  // namespace kernelrl::sandbox
