#include "learner/rl/ingest.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/file.h"
#include "data/rng.h"
#include "learner/rl/sample.h"
#include "profiler_service/reward.h"
#include "proto/verdict.pb.h"

namespace kernelrl::learner::rl {
namespace {

using Kind = v1::LedgerRecord::Kind;

v1::LedgerRecord Record(Kind kind) {
  v1::LedgerRecord r;
  r.set_kind(kind);
  return r;
}

std::string Rfc3339(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(unix_ms), absl::UTCTimeZone());
}

constexpr char kZeroVariance[] = "zero reward variance";
// A group of a stage that has ended (the warm-up set once agentic PPO begins: RFT and value
// pretraining read it from the accepted records, not the buffer). Not stale: no task is issued
// again, and the stale count stays the current stage's.
constexpr char kStageOver[] = "stage over";

template <typename Q>
void EraseFirst(Q* q, const std::string& task_id, int64_t group) {
  auto it = std::find_if(q->begin(), q->end(), [&](const auto& r) { return r.task_id == task_id && r.group == group; });
  if (it != q->end()) q->erase(it);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Ingest>> Ingest::Open(const std::string& dir, std::string job_id,
                                                     IngestOptions options, int64_t committed_step) {
  ::mkdir(dir.c_str(), 0755);
  ::mkdir((dir + "/trajectories").c_str(), 0755);
  std::unique_ptr<Ingest> in(new Ingest(dir, std::move(job_id), options));
  std::vector<v1::LedgerRecord> records;
  auto ledger = Ledger::Open(dir + "/ledger.jsonl", &records);
  if (!ledger.ok()) return ledger.status();
  in->ledger_ = std::move(*ledger);
  absl::MutexLock lock(&in->mu_);
  if (auto s = in->Replay(records, committed_step); !s.ok()) return s;
  return in;
}

std::string Ingest::TrajectoryFile(const std::string& dir, const std::string& id) {
  return absl::StrCat(dir, "/trajectories/", absl::BytesToHexString(id), ".pb");
}

std::string Ingest::TrajectoryPath(const std::string& id) const { return TrajectoryFile(dir_, id); }

absl::StatusOr<v1::Trajectory> Ingest::ReadTrajectory(const std::string& dir, const std::string& id) {
  auto bytes = ReadFileToString(TrajectoryFile(dir, id));
  if (!bytes.ok()) return bytes.status();
  v1::Trajectory t;
  if (!t.ParseFromString(*bytes)) return absl::DataLossError("unreadable trajectory " + id);
  return t;
}

absl::Status Ingest::Replay(const std::vector<v1::LedgerRecord>& records, int64_t committed_step) {
  std::vector<Buffered> accepted;  // In order.
  std::set<std::string> dropped;
  int64_t last_update = 0;  // The last update the ledger records, after its rollbacks.
  for (const v1::LedgerRecord& r : records) {
    switch (r.kind()) {
      case v1::LedgerRecord::LEASED:
        leases_[r.lease_id()] = {r.task_id(),       r.actor_id(),         r.stage(),
                                 r.expires_unix_ms(), r.policy_version(), r.group()};
        if (r.reason() == "retry") {
          EraseFirst(&retry_[r.stage()], r.task_id(), r.group());
        } else {
          ++cursor_[r.stage()];
          group_task_[r.stage()] = r.task_id();
        }
        ++lease_counter_;
        break;
      case v1::LedgerRecord::LEASE_EXPIRED:
        leases_.erase(r.lease_id());
        Requeue(r.stage(), r.task_id(), r.group());
        ++counters_.expired_leases;
        break;
      case v1::LedgerRecord::ACCEPTED:
        leases_.erase(r.lease_id());
        accepted.push_back({r.trajectory_id(), r.task_id(), r.stage(), r.policy_version(), r.group(), r.reward()});
        known_.insert(r.trajectory_id());
        accepted_in_[r.stage()].push_back(r.trajectory_id());
        ++counters_.accepted;
        break;
      case v1::LedgerRecord::REJECTED:
        ++counters_.rejected;
        if (r.reason().rfind("sampling mismatch", 0) == 0) ++counters_.sampling_mismatch;
        if (r.reason().rfind("non-model policy", 0) == 0) ++counters_.non_model_rejected;
        if (!r.task_id().empty()) {
          leases_.erase(r.lease_id());
          Requeue(r.stage(), r.task_id(), r.group());
        }
        break;
      case v1::LedgerRecord::INFRA_ERROR:
        leases_.erase(r.lease_id());
        ++infra_reruns_[RerunKey(r.stage(), r.task_id(), r.group())];
        if (r.reason() == "rerun") {
          Requeue(r.stage(), r.task_id(), r.group());
          ++counters_.infra_reruns;
        } else {
          ++lost_[GroupKey(r.stage(), r.group())];
          ++counters_.infra_dropped;
        }
        break;
      case v1::LedgerRecord::DROPPED:
        dropped.insert(r.trajectory_id());
        if (r.reason().rfind(kZeroVariance, 0) == 0) {
          if (r.reason() == kZeroVariance) {  // The group's first rollout.
            ++counters_.zero_variance_groups_dropped;
            ++drops_since_trained_;
          }
          int64_t& at = zero_variance_at_[r.stage()][r.task_id()];
          at = std::max(at, r.group());
          break;
        }
        if (r.reason().rfind(kStageOver, 0) == 0) break;
        if (!r.task_id().empty()) Requeue(r.stage(), r.task_id(), r.group());
        ++counters_.stale_dropped;
        break;
      case v1::LedgerRecord::TRAINED:
        trained_[r.trajectory_id()] = r.step();
        drops_since_trained_ = 0;
        break;
      case v1::LedgerRecord::ROLLBACK:
        for (auto it = trained_.begin(); it != trained_.end();) {
          it = it->second > r.step() ? trained_.erase(it) : std::next(it);
        }
        last_update = std::min(last_update, r.step());
        break;
      case v1::LedgerRecord::UPDATE:
        last_update = std::max(last_update, r.step());
        break;
      default:  // COMMITTED: nothing to rebuild.
        break;
    }
  }
  // Steps after the checkpoint we resume from did not happen (also those
  // that trained nothing from the buffer and have only an UPDATE record).
  bool void_steps = last_update > committed_step;
  for (auto it = trained_.begin(); it != trained_.end();) {
    if (it->second > committed_step) {
      it = trained_.erase(it);
      void_steps = true;
    } else {
      ++it;
    }
  }
  if (void_steps) {
    v1::LedgerRecord rb = Record(v1::LedgerRecord::ROLLBACK);
    rb.set_step(committed_step);
    rb.set_reason("restart from the checkpoint of this step");
    if (auto s = ledger_->Append({rb}); !s.ok()) return s;
  }
  for (Buffered& b : accepted) {
    if (!trained_.count(b.id) && !dropped.count(b.id)) buffer_.push_back(std::move(b));
  }
  counters_.trained = static_cast<int64_t>(trained_.size());
  return absl::OkStatus();
}

void Ingest::Requeue(const std::string& stage, const std::string& task_id, int64_t group) {
  retry_[stage].push_back({task_id, group});
}

void Ingest::SetStage(const std::string& stage, std::vector<v1::Task> tasks, int rollouts_per_task,
                      int64_t max_fresh_issues, bool model_only, std::vector<std::string> take_policies) {
  absl::MutexLock lock(&mu_);
  stage_ = stage;
  model_only_ = model_only;
  take_policies_ = std::move(take_policies);
  tasks_ = std::move(tasks);
  if (options_.shuffle_tasks) {  // Fisher-Yates on the platform-independent generator: a resumed stage cycles the same order.
    Rng rng(options_.task_order_seed != 0 ? options_.task_order_seed : options_.seed, StableHash(stage));
    for (size_t i = tasks_.size(); i > 1; --i) std::swap(tasks_[i - 1], tasks_[rng.Below(i)]);
  }
  const std::vector<std::string>& deferred = options_.deferred_task_ids;
  std::stable_partition(tasks_.begin(), tasks_.end(), [&](const v1::Task& t) {
    return std::find(deferred.begin(), deferred.end(), t.id()) == deferred.end();
  });
  rollouts_per_task_ = std::max(1, rollouts_per_task);
  max_fresh_ = max_fresh_issues;
}

void Ingest::SetPolicyVersion(int64_t version) {
  absl::MutexLock lock(&mu_);
  version_ = version;
}

const v1::Task* Ingest::FindTask(const std::string& id) const {
  for (const v1::Task& t : tasks_) {
    if (t.id() == id) return &t;
  }
  return nullptr;
}

bool Ingest::Cooling(const std::string& task_id, int64_t group) const {
  if (options_.zero_variance_cooldown_groups <= 0) return false;
  auto stage = zero_variance_at_.find(stage_);
  if (stage == zero_variance_at_.end()) return false;
  auto at = stage->second.find(task_id);
  return at != stage->second.end() && group - at->second <= options_.zero_variance_cooldown_groups;
}

const v1::Task* Ingest::NextGroupTask(int64_t group) const {
  size_t start = 0;
  auto last = group_task_.find(stage_);
  if (last != group_task_.end()) {
    for (size_t i = 0; i < tasks_.size(); ++i) {
      if (tasks_[i].id() == last->second) start = i + 1;
    }
  }
  for (size_t k = 0; k < tasks_.size(); ++k) {
    const v1::Task& t = tasks_[(start + k) % tasks_.size()];
    if (!Cooling(t.id(), group)) return &t;
  }
  return &tasks_[start % tasks_.size()];
}

absl::Status Ingest::ExpireLocked(std::vector<v1::LedgerRecord>* out) {
  const int64_t now = absl::ToUnixMillis(options_.clock->Now());
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.expires_ms > now) {
      ++it;
      continue;
    }
    v1::LedgerRecord r = Record(v1::LedgerRecord::LEASE_EXPIRED);
    r.set_lease_id(it->first);
    r.set_task_id(it->second.task_id);
    r.set_actor_id(it->second.actor_id);
    r.set_stage(it->second.stage);
    r.set_group(it->second.group);
    Requeue(it->second.stage, it->second.task_id, it->second.group);
    ++counters_.expired_leases;
    out->push_back(std::move(r));
    it = leases_.erase(it);
  }
  return absl::OkStatus();
}

absl::Status Ingest::ExpireLeases() {
  absl::MutexLock lock(&mu_);
  std::vector<v1::LedgerRecord> records;
  if (auto s = ExpireLocked(&records); !s.ok()) return s;
  return records.empty() ? absl::OkStatus() : ledger_->Append(std::move(records));
}

absl::StatusOr<std::vector<v1::TaskLease>> Ingest::Lease(const std::string& actor_id, int max_tasks) {
  absl::MutexLock lock(&mu_);
  std::vector<v1::LedgerRecord> records;
  if (auto s = ExpireLocked(&records); !s.ok()) return s;
  std::vector<v1::TaskLease> leases;
  const int64_t expires = absl::ToUnixMillis(options_.clock->Now()) + static_cast<int64_t>(options_.lease_timeout_seconds * 1000);
  std::deque<Retry>& retry = retry_[stage_];
  const bool bounded = model_only_ && options_.max_pending_in_stage > 0;
  int64_t pending = 0;  // The stage's untrained trajectories: buffered, and leased.
  for (const Buffered& b : buffer_) pending += b.stage == stage_;
  for (const auto& [id, l] : leases_) pending += l.stage == stage_;
  while (!stage_.empty() && !tasks_.empty() && static_cast<int>(leases.size()) < max_tasks &&
         static_cast<int64_t>(buffer_.size() + leases_.size()) < options_.buffer_capacity &&
         (!bounded || pending < options_.max_pending_in_stage)) {
    const v1::Task* task = nullptr;
    std::string reason;
    int64_t group = 0;
    if (!retry.empty()) {
      task = FindTask(retry.front().task_id);
      group = retry.front().group;
      retry.pop_front();
      reason = "retry";
      if (task == nullptr) continue;  // A task no longer in the set.
    } else if (max_fresh_ < 0 || cursor_[stage_] < max_fresh_) {
      group = cursor_[stage_] / rollouts_per_task_ + 1;  // From 1: 0 marks records from before groups.
      if (cursor_[stage_] % rollouts_per_task_ == 0) group_task_[stage_] = NextGroupTask(group)->id();
      task = FindTask(group_task_[stage_]);
      if (task == nullptr) task = NextGroupTask(group);  // A group begun before the task set changed.
      ++cursor_[stage_];
      reason = "new";
    } else {
      break;
    }
    v1::TaskLease lease;
    lease.set_lease_id(absl::StrCat(job_id_, "-L", ++lease_counter_));
    lease.set_seed(SeedOf(options_.seed, static_cast<uint64_t>(lease_counter_)));
    lease.set_job_id(job_id_);
    *lease.mutable_task() = *task;
    lease.set_policy_version(version_);
    lease.set_expires_at(Rfc3339(expires));
    leases_[lease.lease_id()] = {task->id(), actor_id, stage_, expires, version_, group};
    v1::LedgerRecord r = Record(v1::LedgerRecord::LEASED);
    r.set_lease_id(lease.lease_id());
    r.set_task_id(task->id());
    r.set_actor_id(actor_id);
    r.set_expires_unix_ms(expires);
    r.set_policy_version(version_);
    r.set_stage(stage_);
    r.set_reason(reason);
    r.set_group(group);
    records.push_back(std::move(r));
    leases.push_back(std::move(lease));
    ++pending;
  }
  if (!records.empty()) {
    if (auto s = ledger_->Append(std::move(records)); !s.ok()) return s;
  }
  return leases;
}

v1::PushTrajectoriesAck Ingest::Push(const std::string& lease_id, const v1::Trajectory& t) {
  v1::PushTrajectoriesAck ack;
  ack.set_trajectory_id(t.id());
  auto reject = [&](const std::string& reason) {
    ack.set_accepted(false);
    ack.set_reason(reason);
    return ack;
  };
  if (t.id().empty() || t.id().size() > 200) return reject("malformed: trajectory id must be 1 to 200 bytes");
  absl::MutexLock lock(&mu_);
  if (known_.count(t.id())) {
    ++counters_.duplicates;
    ack.set_accepted(true);
    ack.set_reason("duplicate: already accepted");
    return ack;
  }
  auto lease = leases_.find(lease_id);
  if (lease == leases_.end()) {
    v1::LedgerRecord r = Record(v1::LedgerRecord::REJECTED);
    r.set_trajectory_id(t.id());
    r.set_lease_id(lease_id);
    r.set_reason("unknown or expired lease");
    ++counters_.rejected;
    (void)ledger_->Append({r});
    return reject(r.reason());
  }
  const LeaseState ls = lease->second;
  v1::LedgerRecord r;
  r.set_trajectory_id(t.id());
  r.set_lease_id(lease_id);
  r.set_task_id(ls.task_id);
  r.set_actor_id(ls.actor_id);
  r.set_stage(ls.stage);
  r.set_policy_version(t.policy_version());
  r.set_reward(t.reward());
  r.set_group(ls.group);
  auto consume = [&](Kind kind, const std::string& reason) -> absl::Status {
    r.set_kind(kind);
    r.set_reason(reason);
    auto s = ledger_->Append({r});
    mu_.AssertHeld();  // Called only below, under Push's lock; tells the analysis so.
    if (s.ok()) leases_.erase(lease_id);
    return s;
  };
  if (!IsTrainingSample(t.final_verdict())) {  // INFRA_ERROR: the machine's failure, not the policy's
    const int n = ++infra_reruns_[RerunKey(ls.stage, ls.task_id, ls.group)];
    const bool rerun = n <= options_.max_infra_reruns;
    if (auto s = consume(v1::LedgerRecord::INFRA_ERROR, rerun ? "rerun" : "dropped"); !s.ok()) {
      return reject(std::string(s.message()));
    }
    if (rerun) {
      Requeue(ls.stage, ls.task_id, ls.group);
      ++counters_.infra_reruns;
    } else {
      ++lost_[GroupKey(ls.stage, ls.group)];
      ++counters_.infra_dropped;
    }
    return reject(rerun ? "infra error: the task is issued again, never trained as a reward"
                        : "infra error: reruns exhausted, task dropped");
  }
  std::string problem;
  const std::string& policy = t.sampling().policy();
  const bool model = policy.empty() || policy == "model";
  const std::string label = model ? "model" : policy;
  if (ls.stage == stage_ && !take_policies_.empty() &&
      std::find(take_policies_.begin(), take_policies_.end(), label) == take_policies_.end()) {
    problem = absl::StrCat("policy ", label, " not taken in stage ", stage_, " (it takes ",
                           absl::StrJoin(take_policies_, ", "), ")");
  } else if (take_policies_.empty() && model_only_ && ls.stage == stage_ && !model) {
    problem = absl::StrCat("non-model policy ", policy,
                           ": this stage weights every token by pi / pi_rollout, which such a trajectory cannot have");
    ++counters_.non_model_rejected;
  } else if (model && t.has_sampling() && options_.temperature > 0 &&
             (std::abs(t.sampling().temperature() - options_.temperature) > 1e-6 ||
              (t.sampling().top_p() > 0 && t.sampling().top_p() < 1))) {
    problem = absl::StrCat("sampling mismatch: temperature ", t.sampling().temperature(), " top_p ",
                           t.sampling().top_p(), " (the job trains on temperature ", options_.temperature,
                           ", no nucleus cut)");
    ++counters_.sampling_mismatch;
  } else if (t.task_id() != ls.task_id) {
    problem = absl::StrCat("malformed: task_id ", t.task_id(), " is not the leased task ", ls.task_id);
  } else if (auto s = SampleFromTrajectory(t, options_.vocab_size, options_.max_trajectory_tokens); !s.ok()) {
    problem = absl::StrCat("malformed: ", s.status().message());
  } else if (version_ - t.policy_version() > options_.max_policy_lag) {
    problem = absl::StrCat("stale policy version ", t.policy_version(), " (current ", version_, ", max lag ",
                           options_.max_policy_lag, ")");
  }
  if (!problem.empty()) {
    ++counters_.rejected;
    if (auto s = consume(v1::LedgerRecord::REJECTED, problem); s.ok()) Requeue(ls.stage, ls.task_id, ls.group);
    return reject(problem);
  }
  if (static_cast<int64_t>(buffer_.size()) >= options_.buffer_capacity) return reject("buffer full: retry later");
  if (auto s = WriteFileAtomically(TrajectoryPath(t.id()), t.SerializeAsString()); !s.ok()) {
    return reject(absl::StrCat("not stored: ", s.message()));
  }
  if (auto s = consume(v1::LedgerRecord::ACCEPTED, ""); !s.ok()) return reject(absl::StrCat("not stored: ", s.message()));
  known_.insert(t.id());
  accepted_in_[ls.stage].push_back(t.id());
  buffer_.push_back({t.id(), ls.task_id, ls.stage, t.policy_version(), ls.group, t.reward()});
  ++counters_.accepted;
  ack.set_accepted(true);
  return ack;
}

absl::StatusOr<std::vector<v1::Trajectory>> Ingest::Take(int n, bool drop_zero_variance, int* groups_taken) {
  absl::MutexLock lock(&mu_);
  // The buffer's groups, in order of their first rollout. Group 0: one per trajectory.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const Buffered*>> groups;
  for (const Buffered& b : buffer_) {
    const std::string key = b.group == 0 ? "id:" + b.id : GroupKey(b.stage, b.group);
    auto [it, fresh] = groups.try_emplace(key);
    if (fresh) order.push_back(key);
    it->second.push_back(&b);
  }
  // Stale groups, and (dynamic sampling) complete groups of equal rewards, leave the buffer.
  std::vector<v1::LedgerRecord> records;
  std::set<std::string> gone;
  auto complete = [&](const std::string& key, const std::vector<const Buffered*>& members)
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (members.front()->group == 0) return true;
    auto lost = lost_.find(key);
    return static_cast<int>(members.size()) + (lost == lost_.end() ? 0 : lost->second) >= rollouts_per_task_;
  };
  for (const std::string& key : order) {
    const std::vector<const Buffered*>& members = groups[key];
    const bool stage_over = members.front()->stage != stage_;
    bool stale = false, equal = true;
    for (const Buffered* b : members) {
      stale |= version_ - b->policy_version > options_.max_policy_lag;
      equal &= b->reward == members.front()->reward;
    }
    bool zero_variance = !stale && !stage_over && drop_zero_variance &&
                         members.size() > 1 && equal && complete(key, members);
    if (zero_variance && options_.max_zero_variance_drops_per_step > 0 &&
        drops_since_trained_ >= options_.max_zero_variance_drops_per_step) {
      zero_variance = false;  // Past the bound: trained as it is.
      if (kept_.insert(key).second) ++counters_.zero_variance_groups_kept;
    }
    if (!stale && !zero_variance && !stage_over) continue;
    for (const Buffered* b : members) {
      v1::LedgerRecord r = Record(v1::LedgerRecord::DROPPED);
      r.set_trajectory_id(b->id);
      r.set_task_id(b->task_id);
      r.set_stage(b->stage);
      r.set_policy_version(b->policy_version);
      r.set_group(b->group);
      if (stage_over) {
        r.set_reason(absl::StrCat(kStageOver, ": now ", stage_));
      } else if (zero_variance) {  // Not issued again: the cursor leases other tasks instead.
        r.set_reason(b == members.front() ? kZeroVariance : std::string(kZeroVariance) + " (same group)");
        int64_t& at = zero_variance_at_[b->stage][b->task_id];
        at = std::max(at, b->group);
      } else {
        r.set_reason(absl::StrCat("stale: version ", b->policy_version, ", current ", version_,
                                  b->policy_version + options_.max_policy_lag < version_ ? "" : " (its group is)"));
        Requeue(b->stage, b->task_id, b->group);
        ++counters_.stale_dropped;
      }
      gone.insert(b->id);
      records.push_back(std::move(r));
    }
    if (zero_variance) {
      ++counters_.zero_variance_groups_dropped;
      ++drops_since_trained_;
    }
  }
  if (!records.empty()) {
    if (auto s = ledger_->Append(std::move(records)); !s.ok()) return s;
  }
  // Whole complete groups of this stage, oldest first.
  const int want = std::max(1, n / rollouts_per_task_);  // GroupsPerBatch, under the lock held here.
  std::vector<const Buffered*> picked;
  int taken = 0;
  for (const std::string& key : order) {
    if (taken >= want) break;
    const std::vector<const Buffered*>& members = groups[key];
    if (gone.count(members.front()->id) || members.front()->stage != stage_ || !complete(key, members)) continue;
    picked.insert(picked.end(), members.begin(), members.end());
    ++taken;
  }
  std::vector<v1::Trajectory> out;
  if (groups_taken != nullptr) *groups_taken = taken;
  for (const Buffered* b : picked) {
    auto t = ReadTrajectory(dir_, b->id);
    if (!t.ok()) return t.status();
    out.push_back(*std::move(t));
  }
  if (!gone.empty()) {
    buffer_.erase(std::remove_if(buffer_.begin(), buffer_.end(), [&](const Buffered& b) { return gone.count(b.id); }),
                  buffer_.end());
  }
  return out;
}

int Ingest::GroupsPerBatch(int n) const {
  absl::MutexLock lock(&mu_);
  return std::max(1, n / rollouts_per_task_);
}

absl::Status Ingest::MarkTrained(const std::vector<std::string>& ids, int64_t step) {
  absl::MutexLock lock(&mu_);
  std::vector<v1::LedgerRecord> records;
  for (const std::string& id : ids) {
    v1::LedgerRecord r = Record(v1::LedgerRecord::TRAINED);
    r.set_trajectory_id(id);
    r.set_step(step);
    r.set_stage(stage_);
    records.push_back(std::move(r));
  }
  if (auto s = ledger_->Append(std::move(records)); !s.ok()) return s;
  std::set<std::string> done(ids.begin(), ids.end());
  buffer_.erase(std::remove_if(buffer_.begin(), buffer_.end(), [&](const Buffered& b) { return done.count(b.id); }),
                buffer_.end());
  for (const std::string& id : ids) trained_[id] = step;
  counters_.trained = static_cast<int64_t>(trained_.size());
  if (!ids.empty()) drops_since_trained_ = 0;
  return absl::OkStatus();
}

absl::Status Ingest::Commit(int64_t step) {
  v1::LedgerRecord r = Record(v1::LedgerRecord::COMMITTED);
  r.set_step(step);
  return ledger_->Append({r});
}

absl::Status Ingest::RecordUpdate(int64_t step, const std::string& stage, int64_t stage_step, int64_t policy_version,
                                  const std::map<std::string, double>& metrics) {
  v1::LedgerRecord r = Record(v1::LedgerRecord::UPDATE);
  r.set_step(step);
  r.set_stage(stage);
  r.set_stage_step(stage_step);
  r.set_policy_version(policy_version);
  r.mutable_metrics()->insert(metrics.begin(), metrics.end());
  return ledger_->Append({r});
}

absl::StatusOr<bool> Ingest::Import(const std::string& stage, const v1::Trajectory& t, const std::string& source) {
  if (t.id().empty() || t.id().size() > 200) return absl::InvalidArgumentError("trajectory id must be 1 to 200 bytes");
  if (!IsTrainingSample(t.final_verdict())) {
    return absl::InvalidArgumentError(absl::StrCat(t.id(), ": an infra error is never trained on"));
  }
  if (auto s = SampleFromTrajectory(t, options_.vocab_size, options_.max_trajectory_tokens); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(t.id(), ": ", s.status().message()));
  }
  absl::MutexLock lock(&mu_);
  if (known_.count(t.id())) return false;
  if (auto s = WriteFileAtomically(TrajectoryPath(t.id()), t.SerializeAsString()); !s.ok()) return s;
  v1::LedgerRecord r = Record(v1::LedgerRecord::ACCEPTED);
  r.set_trajectory_id(t.id());
  r.set_task_id(t.task_id());
  r.set_stage(stage);
  r.set_policy_version(t.policy_version());
  r.set_reward(t.reward());
  r.set_reason("imported from " + source);
  if (auto s = ledger_->Append({r}); !s.ok()) return s;
  known_.insert(t.id());
  accepted_in_[stage].push_back(t.id());
  buffer_.push_back({t.id(), t.task_id(), stage, t.policy_version(), 0, t.reward()});  // As Replay rebuilds it.
  ++counters_.accepted;
  return true;
}

absl::StatusOr<std::vector<v1::Trajectory>> Ingest::AcceptedIn(const std::string& stage) {
  absl::MutexLock lock(&mu_);
  std::vector<v1::Trajectory> out;
  for (const std::string& id : accepted_in_[stage]) {
    auto t = ReadTrajectory(dir_, id);
    if (!t.ok()) return t.status();
    out.push_back(*std::move(t));
  }
  std::stable_sort(out.begin(), out.end(), [](const v1::Trajectory& a, const v1::Trajectory& b) {
    return a.sampling().seed() < b.sampling().seed();
  });
  return out;
}

absl::StatusOr<std::vector<v1::Trajectory>> Ingest::TrainedIn(const std::string& stage, int updates) {
  absl::MutexLock lock(&mu_);
  std::map<int64_t, std::vector<std::string>> by_step;  // Of the stage's trained trajectories, in acceptance order.
  for (const std::string& id : accepted_in_[stage]) {
    auto it = trained_.find(id);
    if (it != trained_.end()) by_step[it->second].push_back(id);
  }
  while (static_cast<int>(by_step.size()) > std::max(0, updates)) by_step.erase(by_step.begin());
  std::vector<v1::Trajectory> out;
  for (const auto& [step, ids] : by_step) {
    for (const std::string& id : ids) {
      auto t = ReadTrajectory(dir_, id);
      if (!t.ok()) return t.status();
      out.push_back(*std::move(t));
    }
  }
  return out;
}

IngestInfo Ingest::Info() const {
  absl::MutexLock lock(&mu_);
  IngestInfo info = counters_;
  info.buffer_depth = static_cast<int64_t>(buffer_.size());
  info.active_leases = static_cast<int64_t>(leases_.size());
  auto retry = retry_.find(stage_);
  info.retry_queue = retry == retry_.end() ? 0 : static_cast<int64_t>(retry->second.size());
  auto cursor = cursor_.find(stage_);
  info.cursor = cursor == cursor_.end() ? 0 : cursor->second;
  const int64_t next_group = info.cursor / rollouts_per_task_ + 1;
  for (const v1::Task& t : tasks_) info.tasks_cooling += Cooling(t.id(), next_group);
  for (const Buffered& b : buffer_) info.max_staleness = std::max<double>(info.max_staleness, version_ - b.policy_version);
  return info;
}

int64_t Ingest::policy_version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

}  // namespace kernelrl::learner::rl
