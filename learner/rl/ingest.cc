#include "learner/rl/ingest.h"

#include <sys/stat.h>

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/file.h"
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

void EraseFirst(std::deque<std::string>* q, const std::string& v) {
  auto it = std::find(q->begin(), q->end(), v);
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

absl::Status Ingest::Replay(const std::vector<v1::LedgerRecord>& records, int64_t committed_step) {
  std::vector<Buffered> accepted;  // In order.
  std::set<std::string> dropped;
  for (const v1::LedgerRecord& r : records) {
    switch (r.kind()) {
      case v1::LedgerRecord::LEASED:
        leases_[r.lease_id()] = {r.task_id(), r.actor_id(), r.stage(), r.expires_unix_ms(), r.policy_version()};
        if (r.reason() == "retry") {
          EraseFirst(&retry_[r.stage()], r.task_id());
        } else {
          ++cursor_[r.stage()];
        }
        ++lease_counter_;
        break;
      case v1::LedgerRecord::LEASE_EXPIRED:
        leases_.erase(r.lease_id());
        retry_[r.stage()].push_back(r.task_id());
        ++counters_.expired_leases;
        break;
      case v1::LedgerRecord::ACCEPTED:
        leases_.erase(r.lease_id());
        accepted.push_back({r.trajectory_id(), r.task_id(), r.stage(), r.policy_version()});
        known_.insert(r.trajectory_id());
        accepted_in_[r.stage()].push_back(r.trajectory_id());
        ++counters_.accepted;
        break;
      case v1::LedgerRecord::REJECTED:
        ++counters_.rejected;
        if (!r.task_id().empty()) {
          leases_.erase(r.lease_id());
          retry_[r.stage()].push_back(r.task_id());
        }
        break;
      case v1::LedgerRecord::INFRA_ERROR:
        leases_.erase(r.lease_id());
        ++infra_reruns_[r.stage() + "/" + r.task_id()];
        if (r.reason() == "rerun") {
          retry_[r.stage()].push_back(r.task_id());
          ++counters_.infra_reruns;
        } else {
          ++counters_.infra_dropped;
        }
        break;
      case v1::LedgerRecord::DROPPED:
        dropped.insert(r.trajectory_id());
        if (!r.task_id().empty()) retry_[r.stage()].push_back(r.task_id());
        ++counters_.stale_dropped;
        break;
      case v1::LedgerRecord::TRAINED:
        trained_[r.trajectory_id()] = r.step();
        break;
      case v1::LedgerRecord::ROLLBACK:
        for (auto it = trained_.begin(); it != trained_.end();) {
          it = it->second > r.step() ? trained_.erase(it) : std::next(it);
        }
        break;
      default:  // COMMITTED, UPDATE: nothing to rebuild.
        break;
    }
  }
  // Steps after the checkpoint we resume from did not happen.
  bool void_steps = false;
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

void Ingest::SetStage(const std::string& stage, std::vector<v1::Task> tasks, int rollouts_per_task,
                      int64_t max_fresh_issues) {
  absl::MutexLock lock(&mu_);
  stage_ = stage;
  tasks_ = std::move(tasks);
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
    retry_[it->second.stage].push_back(it->second.task_id);
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
  std::deque<std::string>& retry = retry_[stage_];
  while (!stage_.empty() && !tasks_.empty() && static_cast<int>(leases.size()) < max_tasks &&
         static_cast<int64_t>(buffer_.size() + leases_.size()) < options_.buffer_capacity) {
    const v1::Task* task = nullptr;
    std::string reason;
    if (!retry.empty()) {
      task = FindTask(retry.front());
      retry.pop_front();
      reason = "retry";
      if (task == nullptr) continue;  // A task no longer in the set.
    } else if (max_fresh_ < 0 || cursor_[stage_] < max_fresh_) {
      task = &tasks_[(cursor_[stage_] / rollouts_per_task_) % tasks_.size()];
      ++cursor_[stage_];
      reason = "new";
    } else {
      break;
    }
    v1::TaskLease lease;
    lease.set_lease_id(absl::StrCat(job_id_, "-L", ++lease_counter_));
    lease.set_job_id(job_id_);
    *lease.mutable_task() = *task;
    lease.set_policy_version(version_);
    lease.set_expires_at(Rfc3339(expires));
    leases_[lease.lease_id()] = {task->id(), actor_id, stage_, expires, version_};
    v1::LedgerRecord r = Record(v1::LedgerRecord::LEASED);
    r.set_lease_id(lease.lease_id());
    r.set_task_id(task->id());
    r.set_actor_id(actor_id);
    r.set_expires_unix_ms(expires);
    r.set_policy_version(version_);
    r.set_stage(stage_);
    r.set_reason(reason);
    records.push_back(std::move(r));
    leases.push_back(std::move(lease));
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
  auto consume = [&](Kind kind, const std::string& reason) -> absl::Status {
    r.set_kind(kind);
    r.set_reason(reason);
    auto s = ledger_->Append({r});
    mu_.AssertHeld();  // Called only below, under Push's lock; tells the analysis so.
    if (s.ok()) leases_.erase(lease_id);
    return s;
  };
  if (!IsTrainingSample(t.final_verdict())) {  // INFRA_ERROR: the machine's failure, not the policy's
    const int n = ++infra_reruns_[ls.stage + "/" + ls.task_id];
    const bool rerun = n <= options_.max_infra_reruns;
    if (auto s = consume(v1::LedgerRecord::INFRA_ERROR, rerun ? "rerun" : "dropped"); !s.ok()) {
      return reject(std::string(s.message()));
    }
    if (rerun) {
      retry_[ls.stage].push_back(ls.task_id);
      ++counters_.infra_reruns;
    } else {
      ++counters_.infra_dropped;
    }
    return reject(rerun ? "infra error: the task is issued again, never trained as a reward"
                        : "infra error: reruns exhausted, task dropped");
  }
  std::string problem;
  if (t.task_id() != ls.task_id) {
    problem = absl::StrCat("malformed: task_id ", t.task_id(), " is not the leased task ", ls.task_id);
  } else if (auto s = SampleFromTrajectory(t, options_.vocab_size, options_.max_trajectory_tokens); !s.ok()) {
    problem = absl::StrCat("malformed: ", s.status().message());
  } else if (version_ - t.policy_version() > options_.max_policy_lag) {
    problem = absl::StrCat("stale policy version ", t.policy_version(), " (current ", version_, ", max lag ",
                           options_.max_policy_lag, ")");
  }
  if (!problem.empty()) {
    ++counters_.rejected;
    if (auto s = consume(v1::LedgerRecord::REJECTED, problem); s.ok()) retry_[ls.stage].push_back(ls.task_id);
    return reject(problem);
  }
  if (static_cast<int64_t>(buffer_.size()) >= options_.buffer_capacity) return reject("buffer full: retry later");
  if (auto s = WriteFileAtomically(TrajectoryPath(t.id()), t.SerializeAsString()); !s.ok()) {
    return reject(absl::StrCat("not stored: ", s.message()));
  }
  if (auto s = consume(v1::LedgerRecord::ACCEPTED, ""); !s.ok()) return reject(absl::StrCat("not stored: ", s.message()));
  known_.insert(t.id());
  accepted_in_[ls.stage].push_back(t.id());
  buffer_.push_back({t.id(), ls.task_id, ls.stage, t.policy_version()});
  ++counters_.accepted;
  ack.set_accepted(true);
  return ack;
}

absl::StatusOr<std::vector<v1::Trajectory>> Ingest::Take(int n) {
  absl::MutexLock lock(&mu_);
  std::vector<v1::LedgerRecord> records;
  for (auto it = buffer_.begin(); it != buffer_.end();) {
    if (version_ - it->policy_version <= options_.max_policy_lag) {
      ++it;
      continue;
    }
    v1::LedgerRecord r = Record(v1::LedgerRecord::DROPPED);
    r.set_trajectory_id(it->id);
    r.set_task_id(it->task_id);
    r.set_stage(it->stage);
    r.set_policy_version(it->policy_version);
    r.set_reason(absl::StrCat("stale: version ", it->policy_version, ", current ", version_));
    retry_[it->stage].push_back(it->task_id);
    ++counters_.stale_dropped;
    records.push_back(std::move(r));
    it = buffer_.erase(it);
  }
  if (!records.empty()) {
    if (auto s = ledger_->Append(std::move(records)); !s.ok()) return s;
  }
  std::vector<v1::Trajectory> out;
  for (const Buffered& b : buffer_) {
    if (static_cast<int>(out.size()) >= n) break;
    if (b.stage != stage_) continue;
    auto bytes = ReadFileToString(TrajectoryPath(b.id));
    if (!bytes.ok()) return bytes.status();
    if (!out.emplace_back().ParseFromString(*bytes)) return absl::DataLossError("unreadable trajectory " + b.id);
  }
  return out;
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

absl::StatusOr<std::vector<v1::Trajectory>> Ingest::AcceptedIn(const std::string& stage) {
  absl::MutexLock lock(&mu_);
  std::vector<v1::Trajectory> out;
  for (const std::string& id : accepted_in_[stage]) {
    auto bytes = ReadFileToString(TrajectoryPath(id));
    if (!bytes.ok()) return bytes.status();
    if (!out.emplace_back().ParseFromString(*bytes)) return absl::DataLossError("unreadable trajectory " + id);
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
  for (const Buffered& b : buffer_) info.max_staleness = std::max<double>(info.max_staleness, version_ - b.policy_version);
  return info;
}

int64_t Ingest::policy_version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

}  // namespace kernelrl::learner::rl
