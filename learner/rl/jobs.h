// The learner's jobs: submitted specs, their state machine, and the one job
// that trains now. Torch-free; what a job does is a JobRunner (the recipe,
// learner/rl/recipe.h) made by the factory the binary passes in.
//
//   PENDING -> RUNNING -> SUCCEEDED | FAILED | CANCELLED
//
// A RUNNING job can be paused (Job.paused): its runner holds at the next step
// boundary (Job.held) with its policy as it is, actors get no new leases but
// their pushes are kept, until Resume. Both flags are persisted like the state.
//
// Contract:
//  * Every state change is written to <state_dir>/jobs/<id>/job.textproto
//    (atomically) before it is visible to GetJob/WatchJob; on Open() the
//    jobs come back, and a job that was RUNNING resumes (its runner picks up
//    from its checkpoint and ledger).
//  * One job runs at a time (one trainer per learner process); others wait
//    PENDING, oldest first.
//  * A bad spec is refused at Submit with InvalidArgument naming the field;
//    it never becomes a FAILED job.
//  * Actors' LeaseTasks / PushTrajectories go to the running job's Ingest.
// Thread-safe.
#ifndef KERNELRL_LEARNER_RL_JOBS_H_
#define KERNELRL_LEARNER_RL_JOBS_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "learner/rl/ingest.h"
#include "learner/rl/learner_metrics.h"
#include "proto/learner.pb.h"

namespace kernelrl::learner::rl {

class JobManager;

// What a runner sees of its job.
class JobContext {
 public:
  const std::string& job_id() const { return id_; }
  const std::string& dir() const { return dir_; }
  v1::Job job() const;
  // Cancelled by the user, or the learner is shutting down (then the job
  // stays RUNNING and resumes on the next start).
  bool ShouldStop() const;
  // A step boundary: while the job is paused, marks it held and blocks until
  // Resume or ShouldStop(). Runners call it before taking each batch; false
  // means stop (ShouldStop()).
  bool HoldWhilePaused();
  // Changes the job (step, stage, metrics, message) and persists it.
  absl::Status Update(const std::function<void(v1::Job*)>& change);
  // The ingest actors talk to while this job runs (nullptr: none).
  void SetIngest(Ingest* ingest);

 private:
  friend class JobManager;
  JobContext(JobManager* m, std::string id, std::string dir) : manager_(m), id_(std::move(id)), dir_(std::move(dir)) {}
  JobManager* manager_;
  std::string id_, dir_;
};

class JobRunner {
 public:
  virtual ~JobRunner() = default;
  // Runs or resumes the job until it is done (OK), fails, or ctx->ShouldStop().
  virtual absl::Status Run(JobContext* ctx) = 0;
};

using JobRunnerFactory = std::function<std::unique_ptr<JobRunner>()>;

class JobManager {
 public:
  // metrics (optional, must outlive the manager): job counts, the running
  // job's buffer, and every push's result and staleness.
  static absl::StatusOr<std::unique_ptr<JobManager>> Open(const std::string& state_dir, JobRunnerFactory factory,
                                                          LearnerMetrics* metrics = nullptr);
  ~JobManager();  // Stops the running job (it stays RUNNING) and joins.

  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<v1::Job> Get(const std::string& id) const ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<v1::Job> Cancel(const std::string& id, const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);
  // Idempotent; a job that is not RUNNING is FailedPrecondition.
  absl::StatusOr<v1::Job> Pause(const std::string& id, const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<v1::Job> Resume(const std::string& id) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<v1::ListJobsResponse> List(int page_size, const std::string& page_token) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until the job's revision passes `*revision` (or `timeout`); fills
  // `job` and `*revision`. False when the timeout passed with no change.
  absl::StatusOr<bool> WaitForChange(const std::string& id, int64_t* revision, absl::Duration timeout, v1::Job* job)
      ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<v1::LeaseTasksResponse> LeaseTasks(const v1::LeaseTasksRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  v1::PushTrajectoriesAck Push(const v1::PushTrajectoriesRequest& request) ABSL_LOCKS_EXCLUDED(mu_);

  static bool Finished(v1::Job::State s) {
    return s == v1::Job::SUCCEEDED || s == v1::Job::FAILED || s == v1::Job::CANCELLED;
  }

 private:
  friend class JobContext;
  struct Entry {
    v1::Job job;
    int64_t revision = 0;
    bool cancel_requested = false;
  };
  JobManager(std::string state_dir, JobRunnerFactory factory, LearnerMetrics* metrics)
      : state_dir_(std::move(state_dir)), factory_(std::move(factory)), metrics_(metrics) {}
  LearnerMetrics::Live LiveMetrics() const ABSL_LOCKS_EXCLUDED(mu_);
  void WorkerLoop();
  absl::Status PersistLocked(Entry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Entry*> RunningLocked(const std::string& id, const char* what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<v1::Job> SetPaused(const std::string& id, bool paused, const std::string& message)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::string JobDir(const std::string& id) const { return state_dir_ + "/jobs/" + id; }

  const std::string state_dir_;
  const JobRunnerFactory factory_;
  LearnerMetrics* const metrics_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  std::map<std::string, Entry> jobs_ ABSL_GUARDED_BY(mu_);  // Ids sort by creation time.
  std::string running_ ABSL_GUARDED_BY(mu_);
  // The running job's ingest. Readers (RPCs, metrics) hold ingest_mu_ shared
  // for the whole call, so SetIngest(nullptr), which takes it exclusively,
  // waits for them before the runner destroys the ingest.
  mutable absl::Mutex ingest_mu_ ABSL_ACQUIRED_AFTER(mu_);
  Ingest* ingest_ ABSL_GUARDED_BY(ingest_mu_) = nullptr;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t counter_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread worker_;
};

}  // namespace kernelrl::learner::rl

#endif  // KERNELRL_LEARNER_RL_JOBS_H_
