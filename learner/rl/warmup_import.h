// Trajectories of an earlier job, for a later job to take: its warm-up set
// instead of collecting one (StageConfig.import_job_dir; the scripted
// engineer's trajectories do not depend on the policy, so seeds of the later
// stages can share one warm-up), and its accepted rollouts as the critic's
// value-pretraining data (ValuePretrainConfig.import_job_dirs).
#ifndef KERNELRL_LEARNER_RL_WARMUP_IMPORT_H_
#define KERNELRL_LEARNER_RL_WARMUP_IMPORT_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/trajectory.pb.h"

namespace kernelrl::learner::rl {

// The accepted agent_warmup trajectories of the job in `job_dir` (its
// job.textproto, ledger.jsonl and trajectories/), in acceptance order, those
// of `task_ids` only, at most `max`. Refused (FailedPrecondition) unless that
// job's base checkpoint has the same tokenizer.json as `base_checkpoint`:
// token ids mean nothing under another vocabulary. NotFound when none is left.
absl::StatusOr<std::vector<v1::Trajectory>> ReadWarmupSet(const std::string& job_dir,
                                                          const std::string& base_checkpoint,
                                                          const std::set<std::string>& task_ids, int64_t max);

// As ReadWarmupSet, but the accepted trajectories of every stage (the
// warm-up's and each PPO stage's), and of `task_ids` only when that is not
// empty; no cap. The same tokenizer check; NotFound when none is left.
absl::StatusOr<std::vector<v1::Trajectory>> ReadAcceptedTrajectories(const std::string& job_dir,
                                                                     const std::string& base_checkpoint,
                                                                     const std::set<std::string>& task_ids);

}  // namespace kernelrl::learner::rl

#endif  // KERNELRL_LEARNER_RL_WARMUP_IMPORT_H_
