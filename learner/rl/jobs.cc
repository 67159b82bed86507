#include "learner/rl/jobs.h"

#include <dirent.h>

#include <filesystem>
#include <sys/stat.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/file.h"
#include "common/log.h"
#include "google/protobuf/text_format.h"
#include "learner/rl/job_config.h"

namespace kernelrl::learner::rl {

v1::Job JobContext::job() const {
  absl::MutexLock lock(&manager_->mu_);
  return manager_->jobs_.at(id_).job;
}

bool JobContext::ShouldStop() const {
  absl::MutexLock lock(&manager_->mu_);
  return manager_->stop_ || manager_->jobs_.at(id_).cancel_requested;
}

bool JobContext::HoldWhilePaused() {
  absl::MutexLock lock(&manager_->mu_);
  JobManager::Entry& e = manager_->jobs_.at(id_);
  const auto stopping = [&] {
    manager_->mu_.AssertHeld();  // Called only below, under the lock; tells the analysis so.
    return manager_->stop_ || e.cancel_requested;
  };
  if (!e.job.paused() || stopping()) return !stopping();
  e.job.set_held(true);
  (void)manager_->PersistLocked(&e);
  KLOG(INFO) << "job " << id_ << " held at update " << e.job.step();
  while (e.job.paused() && !stopping()) manager_->changed_.Wait(&manager_->mu_);
  e.job.set_held(false);
  (void)manager_->PersistLocked(&e);
  return !stopping();
}

absl::Status JobContext::Update(const std::function<void(v1::Job*)>& change) {
  absl::MutexLock lock(&manager_->mu_);
  JobManager::Entry& e = manager_->jobs_.at(id_);
  change(&e.job);
  return manager_->PersistLocked(&e);
}

void JobContext::SetIngest(Ingest* ingest) {
  absl::MutexLock lock(&manager_->ingest_mu_);
  manager_->ingest_ = ingest;
}

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Open(const std::string& state_dir, JobRunnerFactory factory,
                                                             LearnerMetrics* metrics) {
  std::error_code ec;  // the state dir and its parents, like mkdir -p; opendir below reports failure
  std::filesystem::create_directories(state_dir + "/jobs", ec);
  std::unique_ptr<JobManager> m(new JobManager(state_dir, std::move(factory), metrics));
  DIR* d = ::opendir((state_dir + "/jobs").c_str());
  if (d == nullptr) return absl::InternalError(absl::StrCat("cannot open ", state_dir, "/jobs"));
  std::vector<std::string> ids;
  while (dirent* de = ::readdir(d)) {
    if (de->d_name[0] != '.') ids.push_back(de->d_name);
  }
  ::closedir(d);
  {
    absl::MutexLock lock(&m->mu_);
    for (const std::string& id : ids) {
      auto text = ReadFileToString(m->JobDir(id) + "/job.textproto");
      if (!text.ok()) continue;  // A job dir whose first write did not land.
      Entry e;
      if (!google::protobuf::TextFormat::ParseFromString(*text, &e.job)) {
        return absl::DataLossError(absl::StrCat(m->JobDir(id), "/job.textproto does not parse"));
      }
      e.job.set_held(false);  // No runner holds it yet; a paused one holds again when it resumes.
      m->jobs_[id] = std::move(e);
      m->counter_++;
    }
  }
  m->worker_ = std::thread([p = m.get()] { p->WorkerLoop(); });
  if (metrics != nullptr) {
    JobManager* raw = m.get();
    metrics->SetLiveSource([raw] { return raw->LiveMetrics(); });
  }
  return m;
}

JobManager::~JobManager() {
  if (metrics_ != nullptr) metrics_->SetLiveSource(nullptr);
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    changed_.SignalAll();
  }
  if (worker_.joinable()) worker_.join();  // Open may fail before the worker starts
}

absl::Status JobManager::PersistLocked(Entry* e) {
  e->job.set_updated_at(NowRfc3339());
  ::mkdir(JobDir(e->job.id()).c_str(), 0755);
  auto s = WriteFileAtomically(JobDir(e->job.id()) + "/job.textproto", TextProto(e->job));
  ++e->revision;
  changed_.SignalAll();
  return s;
}

absl::StatusOr<v1::Job> JobManager::Submit(const v1::JobSpec& spec) {
  if (auto s = ValidateJobSpec(spec); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  Entry e;
  e.job.set_id(absl::StrFormat("job-%s-%04d", absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::UTCTimeZone()),
                               ++counter_));
  *e.job.mutable_spec() = spec;
  e.job.set_state(v1::Job::PENDING);
  e.job.set_created_at(NowRfc3339());
  if (auto s = PersistLocked(&e); !s.ok()) return s;
  const std::string id = e.job.id();
  jobs_[id] = std::move(e);
  return jobs_[id].job;
}

absl::StatusOr<v1::Job> JobManager::Get(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job ", id));
  return it->second.job;
}

absl::StatusOr<v1::Job> JobManager::Cancel(const std::string& id, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job ", id));
  Entry& e = it->second;
  if (Finished(e.job.state())) {
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " already ended: ", v1::Job::State_Name(e.job.state())));
  }
  e.cancel_requested = true;
  e.job.set_message(absl::StrCat("cancelled: ", reason.empty() ? "by request" : reason));
  // Not in a runner (pending, or RUNNING before a restart and not resumed yet): ends now.
  if (running_ != id) e.job.set_state(v1::Job::CANCELLED);
  if (auto s = PersistLocked(&e); !s.ok()) return s;
  return e.job;
}

absl::StatusOr<JobManager::Entry*> JobManager::RunningLocked(const std::string& id, const char* what) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job ", id));
  if (it->second.job.state() != v1::Job::RUNNING || it->second.cancel_requested) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " is ", v1::Job::State_Name(it->second.job.state()), ": only a RUNNING job can ", what));
  }
  return &it->second;
}

absl::StatusOr<v1::Job> JobManager::Pause(const std::string& id, const std::string& reason) {
  return SetPaused(id, true, absl::StrCat("paused: ", reason.empty() ? "by request" : reason));
}

absl::StatusOr<v1::Job> JobManager::Resume(const std::string& id) { return SetPaused(id, false, "resumed"); }

absl::StatusOr<v1::Job> JobManager::SetPaused(const std::string& id, bool paused, const std::string& message) {
  absl::MutexLock lock(&mu_);
  auto e = RunningLocked(id, paused ? "be paused" : "be resumed");
  if (!e.ok()) return e.status();
  if ((*e)->job.paused() == paused) return (*e)->job;  // Idempotent.
  (*e)->job.set_paused(paused);
  (*e)->job.set_message(message);
  if (auto s = PersistLocked(*e); !s.ok()) return s;  // Wakes a held runner.
  return (*e)->job;
}

absl::StatusOr<v1::ListJobsResponse> JobManager::List(int page_size, const std::string& page_token) const {
  if (page_size < 0) return absl::InvalidArgumentError("page_size must be >= 0");
  if (page_size == 0) page_size = 50;
  int64_t offset = 0;
  if (!page_token.empty() && (!absl::SimpleAtoi(page_token, &offset) || offset < 0)) {
    return absl::InvalidArgumentError("page_token: not a token from ListJobs");
  }
  absl::MutexLock lock(&mu_);
  v1::ListJobsResponse out;
  int64_t i = 0;
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it, ++i) {  // Newest first.
    if (i < offset) continue;
    if (out.jobs_size() == page_size) {
      out.set_next_page_token(std::to_string(i));
      break;
    }
    *out.add_jobs() = it->second.job;
  }
  return out;
}

absl::StatusOr<bool> JobManager::WaitForChange(const std::string& id, int64_t* revision, absl::Duration timeout,
                                               v1::Job* job) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job ", id));
    if (it->second.revision != *revision) {
      *revision = it->second.revision;
      *job = it->second.job;
      return true;
    }
    if (changed_.WaitWithDeadline(&mu_, deadline)) return false;
  }
}

absl::StatusOr<v1::LeaseTasksResponse> JobManager::LeaseTasks(const v1::LeaseTasksRequest& request) {
  if (request.actor_id().empty()) return absl::InvalidArgumentError("actor_id: required");
  if (request.max_tasks() < 1) return absl::InvalidArgumentError("max_tasks: must be >= 1");
  {
    absl::MutexLock lock(&mu_);
    if (!running_.empty() && jobs_.at(running_).job.paused()) return v1::LeaseTasksResponse{};  // Back off.
  }
  absl::ReaderMutexLock lock(&ingest_mu_);
  Ingest* ingest = ingest_;
  v1::LeaseTasksResponse out;
  if (ingest == nullptr) return out;  // No job collecting: back off and retry.
  auto leases = ingest->Lease(request.actor_id(), request.max_tasks());
  if (!leases.ok()) return leases.status();
  for (auto& l : *leases) *out.add_leases() = std::move(l);
  return out;
}

v1::PushTrajectoriesAck JobManager::Push(const v1::PushTrajectoriesRequest& request) {
  absl::ReaderMutexLock lock(&ingest_mu_);
  Ingest* ingest = ingest_;
  if (ingest == nullptr) {
    v1::PushTrajectoriesAck ack;
    ack.set_trajectory_id(request.trajectory().id());
    ack.set_reason("no job is collecting trajectories");
    if (metrics_ != nullptr) metrics_->RecordPush(ack, -1);
    return ack;
  }
  const int64_t staleness = ingest->policy_version() - request.trajectory().policy_version();
  v1::PushTrajectoriesAck ack = ingest->Push(request.lease_id(), request.trajectory());
  if (metrics_ != nullptr) metrics_->RecordPush(ack, staleness);
  return ack;
}

LearnerMetrics::Live JobManager::LiveMetrics() const {
  LearnerMetrics::Live live;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, e] : jobs_) {
      ++live.jobs_by_state[v1::Job::State_Name(e.job.state())];
      live.paused_jobs += e.job.state() == v1::Job::RUNNING && e.job.paused();
    }
  }
  absl::ReaderMutexLock lock(&ingest_mu_);
  if (ingest_ != nullptr) {
    const IngestInfo info = ingest_->Info();
    live.has_ingest = true;
    live.buffer_depth = info.buffer_depth;
    live.active_leases = info.active_leases;
    live.buffer_staleness_max = info.max_staleness;
  }
  return live;
}

void JobManager::WorkerLoop() {
  while (true) {
    std::string id;
    {
      absl::MutexLock lock(&mu_);
      while (!stop_) {
        // A job that was RUNNING before a restart goes first, then the oldest PENDING.
        for (auto& [jid, e] : jobs_) {
          if (e.job.state() == v1::Job::RUNNING && !e.cancel_requested) id = jid;
        }
        for (auto& [jid, e] : jobs_) {
          if (id.empty() && e.job.state() == v1::Job::PENDING) id = jid;
        }
        if (!id.empty()) break;
        changed_.Wait(&mu_);
      }
      if (stop_) return;
      Entry& e = jobs_.at(id);
      e.job.set_state(v1::Job::RUNNING);
      (void)PersistLocked(&e);
      running_ = id;
    }
    JobContext ctx(this, id, JobDir(id));
    std::unique_ptr<JobRunner> runner = factory_();
    absl::Status status = runner->Run(&ctx);
    ctx.SetIngest(nullptr);  // Before the runner (and any ingest it owns) goes.
    runner.reset();
    absl::MutexLock lock(&mu_);
    running_.clear();
    Entry& e = jobs_.at(id);
    if (e.cancel_requested) {
      e.job.set_state(v1::Job::CANCELLED);
    } else if (stop_) {
      continue;  // Shutdown: stays RUNNING, resumes on the next start.
    } else if (status.ok()) {
      e.job.set_state(v1::Job::SUCCEEDED);
      e.job.set_message("done");
    } else {
      e.job.set_state(v1::Job::FAILED);
      e.job.set_message(std::string(status.message()));
      KLOG(ERROR) << "job " << id << " failed: " << status;
    }
    (void)PersistLocked(&e);
  }
}

}  // namespace kernelrl::learner::rl
