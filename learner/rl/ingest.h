// Trajectory ingest of one job: task leases for actors, the bounded buffer
// of pushed trajectories, and the ledger that makes both survive a restart.
//
// Flow: Lease() hands out the current stage's tasks (a data cursor over the
// task list, each task `rollouts_per_task` times in a row: those leases are
// one group; tasks whose lease expired, whose trajectory was stale or hit
// INFRA_ERROR come first, in their group; with a zero-variance cooldown, a
// group's task is the next in the list that is not cooling down). Push() checks a trajectory
// against its lease, stores it (file + ACCEPTED record, fsynced) and only
// then acks. The trainer takes batches of whole groups with Take(), records
// them with MarkTrained(step) before it checkpoints that step.
//
// Invariants (what a restart relies on):
//  * A trajectory id is accepted at most once; a repeated push is acked as a
//    duplicate without a second copy (idempotent actors can retry).
//  * A trajectory is trained at most once per committed step: TRAINED records
//    of a step later than the checkpoint a restart resumes from are void
//    (ROLLBACK record), and those trajectories go back into the buffer.
//  * INFRA_ERROR trajectories (IsTrainingSample false, profiler_service/reward.h)
//    are never buffered: their task is issued again
//    up to max_infra_reruns times, then dropped and counted.
//  * A buffered trajectory older than max_policy_lag versions is dropped at
//    Take() with the rest of its group's buffered rollouts, and their tasks
//    are issued again in that group.
//  * A group is taken whole or not at all: it is never split across steps
//    (the per-task baseline is its rollouts' leave-one-out mean). A group is
//    complete when every one of its rollouts is buffered or lost for good
//    (INFRA_ERROR past its reruns).
//  * A model-sampled trajectory whose SamplingInfo differs from the job's
//    sampling parameters is rejected ("sampling mismatch", counted); in a
//    stage that trains with importance ratios (SetStage model_only) a
//    trajectory from a non-model policy is rejected ("non-model policy", counted).
// Thread-safe: actors' RPCs and the trainer thread call in concurrently.
#ifndef KERNELRL_LEARNER_RL_INGEST_H_
#define KERNELRL_LEARNER_RL_INGEST_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "learner/rl/ledger.h"
#include "proto/learner.pb.h"
#include "proto/trajectory.pb.h"

namespace kernelrl::learner::rl {

struct IngestOptions {
  int64_t max_policy_lag = 1;
  int buffer_capacity = 4096;
  double lease_timeout_seconds = 1800;
  int max_infra_reruns = 2;
  int64_t vocab_size = 0;             // > 0: token ids are checked at push.
  int64_t max_trajectory_tokens = 0;  // > 0: longer trajectories are rejected.
  // The job's sampling temperature (PpoConfig.temperature); 0 = not checked.
  double temperature = 0;
  // A task whose group was dropped for equal rewards (dynamic sampling) is not
  // given a new group until this many more groups were issued in the stage
  // (PpoConfig.zero_variance_cooldown_groups); 0 = no cooldown.
  int64_t zero_variance_cooldown_groups = 0;
  // Dynamic sampling's bound: once this many groups were dropped for equal
  // rewards since the last trained batch, equal-reward groups are kept (and
  // counted) until a batch is trained, so a policy that fails (or solves)
  // every task still gets its updates. 0 = unbounded.
  int64_t max_zero_variance_drops_per_step = 0;
  // Stages that train on the model's samples (model_only): no lease, fresh or
  // retried, while the stage's untrained trajectories (buffered and leased)
  // number this many; more would only go stale before a batch could take
  // them. The recipe sets (max_policy_lag + 1) x a batch's most trajectories
  // (max(trajectories_per_step, rollouts_per_task)). 0 = no bound.
  int64_t max_pending_in_stage = 0;
  // The job's seed: lease n carries SeedOf(seed, n) (data/rng.h), so a run's
  // rollouts sample the same whichever actor takes which lease.
  uint64_t seed = 0;
  // Each stage's tasks cycled in a random order drawn from (task_order_seed, or
  // `seed` when 0, and the stage's name) instead of as given (IngestConfig).
  bool shuffle_tasks = false;
  uint64_t task_order_seed = 0;
  // Tasks every stage's cycle leases after all the others (IngestConfig.deferred_task_ids).
  std::vector<std::string> deferred_task_ids;
  Clock* clock = RealClock();         // Lease expiry reads it; tests move a FakeClock.
};

struct IngestInfo {
  int64_t buffer_depth = 0;
  int64_t active_leases = 0;
  int64_t retry_queue = 0;
  int64_t cursor = 0;  // Fresh issues in the current stage.
  int64_t accepted = 0, rejected = 0, duplicates = 0, stale_dropped = 0, expired_leases = 0;
  int64_t infra_reruns = 0, infra_dropped = 0, trained = 0;
  int64_t sampling_mismatch = 0, non_model_rejected = 0;  // Of `rejected`, by reason.
  int64_t zero_variance_groups_dropped = 0;            // Dynamic sampling.
  int64_t tasks_cooling = 0;  // Of the stage's tasks, left out of the next group (the cooldown).
  int64_t zero_variance_groups_kept = 0;  // Equal-reward groups kept past the drop bound (this process).
  double max_staleness = 0;  // Policy versions behind, over the buffer.
};

class Ingest {
 public:
  // `dir` holds ledger.jsonl and trajectories/. committed_step: the step of
  // the checkpoint training resumes from (0 = none).
  static absl::StatusOr<std::unique_ptr<Ingest>> Open(const std::string& dir, std::string job_id,
                                                      IngestOptions options, int64_t committed_step);

  // The work of a stage. The cursor and retry queue of `stage` come from the
  // ledger, so calling this after a restart continues where it stopped.
  // model_only: the stage trains with importance ratios, so it takes only
  // trajectories sampled by the model. take_policies (StageConfig): when not
  // empty, exactly the sampling policies it takes (in place of model_only);
  // others are rejected, the task requeued.
  void SetStage(const std::string& stage, std::vector<v1::Task> tasks, int rollouts_per_task,
                int64_t max_fresh_issues, bool model_only = false, std::vector<std::string> take_policies = {})
      ABSL_LOCKS_EXCLUDED(mu_);
  void SetPolicyVersion(int64_t version) ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<std::vector<v1::TaskLease>> Lease(const std::string& actor_id, int max_tasks)
      ABSL_LOCKS_EXCLUDED(mu_);
  v1::PushTrajectoriesAck Push(const std::string& lease_id, const v1::Trajectory& trajectory)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Whole complete groups of the current stage, oldest first: up to max(1,
  // n / rollouts_per_task) of them (how many in *groups_taken; a batch is
  // ready when that is the maximum). They stay buffered until MarkTrained.
  // Stale groups are dropped first; with drop_zero_variance, so are complete
  // groups whose rewards are all equal (dynamic sampling: the cursor leases
  // more tasks in their place).
  absl::StatusOr<std::vector<v1::Trajectory>> Take(int n, bool drop_zero_variance = false,
                                                   int* groups_taken = nullptr) ABSL_LOCKS_EXCLUDED(mu_);
  // Groups a batch of n trajectories holds: max(1, n / rollouts_per_task).
  int GroupsPerBatch(int n) const ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status MarkTrained(const std::vector<std::string>& trajectory_ids, int64_t step) ABSL_LOCKS_EXCLUDED(mu_);
  // The checkpoint of `step` is durable.
  absl::Status Commit(int64_t step) ABSL_LOCKS_EXCLUDED(mu_);
  // The figures of the committed update `step` (an UPDATE record): the durable
  // record `kernelrl learn` draws its curves from, since polling the job misses
  // fast updates. Replay ignores these records.
  absl::Status RecordUpdate(int64_t step, const std::string& stage, int64_t stage_step, int64_t policy_version,
                            const std::map<std::string, double>& metrics) ABSL_LOCKS_EXCLUDED(mu_);
  // Records an earlier job's accepted trajectory as accepted in `stage`
  // (file and ledger, so a restart replays it), without a lease. An id
  // already accepted is left alone (false).
  absl::StatusOr<bool> Import(const std::string& stage, const v1::Trajectory& trajectory, const std::string& source)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Every trajectory accepted in `stage` (the warm-up set RFT and value
  // pretraining read), ordered by their rollouts' seeds (SamplingInfo.seed), which
  // the job's seed fixes: not by which actor finished first. Those without a seed
  // (imported from a job before seeds) come first, in acceptance order.
  absl::StatusOr<std::vector<v1::Trajectory>> AcceptedIn(const std::string& stage) ABSL_LOCKS_EXCLUDED(mu_);
  // The trajectories `stage` trained on in its last `updates` updates (by their TRAINED records,
  // so a restart finds the same ones), oldest update first.
  absl::StatusOr<std::vector<v1::Trajectory>> TrainedIn(const std::string& stage, int updates)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Expires overdue leases (also done on every Lease call).
  absl::Status ExpireLeases() ABSL_LOCKS_EXCLUDED(mu_);

  IngestInfo Info() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t policy_version() const ABSL_LOCKS_EXCLUDED(mu_);
  const std::string& ledger_path() const { return ledger_->path(); }
  // Where an accepted trajectory is stored (a serialized v1::Trajectory):
  // data-parallel ranks read their shard from there.
  static std::string TrajectoryFile(const std::string& dir, const std::string& id);
  // The stored trajectory `id` of the job in `dir` (DataLoss when it does not parse).
  static absl::StatusOr<v1::Trajectory> ReadTrajectory(const std::string& dir, const std::string& id);

 private:
  struct LeaseState {
    std::string task_id, actor_id, stage;
    int64_t expires_ms = 0, policy_version = 0, group = 0;
  };
  struct Buffered {
    std::string id, task_id, stage;
    int64_t policy_version = 0, group = 0;
    double reward = 0;
  };
  struct Retry {
    std::string task_id;
    int64_t group = 0;
  };
  // "stage/group"; group 0 (ledgers from before groups): each trajectory its own.
  static std::string GroupKey(const std::string& stage, int64_t group) { return stage + "/" + std::to_string(group); }
  // The INFRA_ERROR rerun budget's owner: one group's rollouts of a task (the
  // task alone for group 0, records from before groups).
  static std::string RerunKey(const std::string& stage, const std::string& task_id, int64_t group) {
    return stage + "/" + task_id + "/" + std::to_string(group);
  }
  void Requeue(const std::string& stage, const std::string& task_id, int64_t group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Ingest(std::string dir, std::string job_id, IngestOptions options)
      : dir_(std::move(dir)), job_id_(std::move(job_id)), options_(options) {}
  absl::Status Replay(const std::vector<v1::LedgerRecord>& records, int64_t committed_step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string TrajectoryPath(const std::string& id) const;
  absl::Status ExpireLocked(std::vector<v1::LedgerRecord>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const v1::Task* FindTask(const std::string& id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The task of the stage's next group `group`: after the last group's task in
  // list order, the first not cooling down (every one cooling: the next).
  const v1::Task* NextGroupTask(int64_t group) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Cooling(const std::string& task_id, int64_t group) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_, job_id_;
  const IngestOptions options_;
  std::unique_ptr<Ledger> ledger_;

  mutable absl::Mutex mu_;
  std::string stage_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::Task> tasks_ ABSL_GUARDED_BY(mu_);
  int rollouts_per_task_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t max_fresh_ ABSL_GUARDED_BY(mu_) = -1;  // < 0: unbounded.
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t lease_counter_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> cursor_ ABSL_GUARDED_BY(mu_);           // Per stage.
  std::map<std::string, std::string> group_task_ ABSL_GUARDED_BY(mu_);   // Per stage: the last group's task.
  // Per stage, per task: the group of its last zero-variance drop.
  std::map<std::string, std::map<std::string, int64_t>> zero_variance_at_ ABSL_GUARDED_BY(mu_);
  int64_t drops_since_trained_ ABSL_GUARDED_BY(mu_) = 0;  // Zero-variance groups dropped since the last batch.
  std::set<std::string> kept_ ABSL_GUARDED_BY(mu_);  // Group keys kept past the bound (counted once).
  bool model_only_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> take_policies_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::deque<Retry>> retry_ ABSL_GUARDED_BY(mu_);  // Per stage.
  std::map<std::string, int> lost_ ABSL_GUARDED_BY(mu_);  // Per group key: rollouts lost for good.
  std::map<std::string, int> infra_reruns_ ABSL_GUARDED_BY(mu_);        // Per rollout slot: RerunKey.
  std::map<std::string, LeaseState> leases_ ABSL_GUARDED_BY(mu_);
  std::deque<Buffered> buffer_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> known_ ABSL_GUARDED_BY(mu_);    // Accepted (or being stored) trajectory ids.
  std::map<std::string, int64_t> trained_ ABSL_GUARDED_BY(mu_);  // id -> step.
  std::map<std::string, std::vector<std::string>> accepted_in_ ABSL_GUARDED_BY(mu_);  // stage -> ids.
  IngestInfo counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kernelrl::learner::rl

#endif  // KERNELRL_LEARNER_RL_INGEST_H_
