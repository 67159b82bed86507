// The learner's Prometheus metrics (common/metrics.h), torch-free. Names and
// labels are the ones deploy/monitoring/ reads (docs/OPERATIONS.md "Metrics"):
//
//   kernelrl_learner_jobs{state}                    gauge: jobs per Job.State name
//   kernelrl_learner_ppo_steps_total                counter: optimizer steps committed (every stage)
//   kernelrl_learner_policy_version                 gauge: latest committed version
//   kernelrl_learner_trajectories_total{result}     counter: pushes by result (accepted, duplicate,
//                                                   rejected, stale, infra_error, buffer_full)
//   kernelrl_learner_trajectory_staleness_versions  histogram (1,2,4,8,16): learner version minus the
//                                                   trajectory's sampling version, at ingest
//
// and the training signals of the last committed step (docs/LEARNER.md):
// reward (mean gauge, per-trajectory histogram), entropy, explained
// variance, clip fraction, IS-ratio statistics, rollout KL, response-length-
// clipped ratio, losses, gradient norms, tokens/s, step time (histogram),
// MFU, tokens and trajectories trained, buffer depth and staleness, leases.
//
// Thread-safe. The live gauges (jobs, buffer) come from a source function
// the JobManager installs and removes; it runs before each exposition.
#ifndef KERNELRL_LEARNER_RL_LEARNER_METRICS_H_
#define KERNELRL_LEARNER_RL_LEARNER_METRICS_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "proto/learner.pb.h"

namespace kernelrl::learner::rl {

class LearnerMetrics {
 public:
  // What the collect hook reads from the job manager.
  struct Live {
    std::map<std::string, int> jobs_by_state;  // Job.State name -> count.
    int paused_jobs = 0;                       // RUNNING jobs held by PauseJob.
    bool has_ingest = false;
    int64_t buffer_depth = 0, active_leases = 0;
    double buffer_staleness_max = 0;
  };

  explicit LearnerMetrics(MetricsRegistry* registry);
  ~LearnerMetrics();

  // `source` = nullptr removes it (before what it reads goes away).
  void SetLiveSource(std::function<Live()> source) ABSL_LOCKS_EXCLUDED(mu_);

  // One push: its ack, and the versions between the learner and the
  // trajectory's sampling policy (< 0: not known, e.g. a malformed push).
  void RecordPush(const v1::PushTrajectoriesAck& ack, int64_t staleness_versions);

  // One committed optimizer step: the trainer's StepMetrics (by name, as
  // the recipe puts them in the job), the rewards of the trajectories it
  // trained on, the step's policy version, and the bf16 peak FLOP/s of all
  // devices it ran on (0: unknown, no MFU).
  void RecordStep(const std::map<std::string, double>& m, const std::vector<double>& rewards, int64_t policy_version,
                  double peak_flops);

  // Result label of an ack (exposed for tests).
  static std::string PushResult(const v1::PushTrajectoriesAck& ack);

 private:
  void Collect() ABSL_LOCKS_EXCLUDED(mu_);

  MetricsRegistry* registry_;
  Family<Gauge>& jobs_;
  Gauge& paused_jobs_;
  Counter& steps_;
  Gauge& policy_version_;
  Family<Counter>& trajectories_;
  Histogram& staleness_;
  Histogram& reward_;
  Histogram& step_seconds_;
  Family<Gauge>& loss_;
  Family<Gauge>& grad_norm_;
  Family<Gauge>& is_ratio_;
  Family<Gauge>& reward_stat_;
  Gauge &entropy_, &explained_variance_, &clip_fraction_, &mask_fraction_, &dual_clip_fraction_, &kl_, &length_clipped_;
  Gauge& reward_mean_;
  Gauge &tokens_per_second_, &mfu_, &flops_per_second_, &buffer_depth_, &buffer_staleness_, &leases_;
  Counter &tokens_trained_, &trajectories_trained_;

  absl::Mutex mu_;
  std::function<Live()> source_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> seen_states_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kernelrl::learner::rl

#endif  // KERNELRL_LEARNER_RL_LEARNER_METRICS_H_
