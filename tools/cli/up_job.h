// The job phase of `kernelrl up`: submit a JobSpec to the learner, follow it with
// WatchJob, print one progress line per change, return the final Job.
//
// Restart-tolerant: the learner may be killed and restarted by the supervisor
// while the job runs (its jobs persist); a broken watch stream is reopened with
// GetJob + WatchJob until `deadline`, so progress resumes after the restart.
#ifndef KERNELRL_TOOLS_CLI_UP_JOB_H_
#define KERNELRL_TOOLS_CLI_UP_JOB_H_

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/learner.pb.h"

namespace kernelrl::up {

// The default job: two PPO updates of a tiny model on the given tasks
// (tools/cli/up_quickstart.py writes both), agentic stage only, on the GPU
// or the CPU.
v1::JobSpec QuickstartJobSpec(const std::string& base_checkpoint, const std::string& task_set, bool gpu);

// "RUNNING step 3 policy v4 | reward_mean=0.50 rollouts=12 verdicts_ok=5".
std::string ProgressLine(const v1::Job& job);
// The multi-line final report of a finished job.
std::string FinalReport(const v1::Job& job, absl::Duration took);

// Submits `spec` to the Learner at `address` and follows the job until it ends
// (SUCCEEDED, FAILED, CANCELLED), `stop` becomes true (then the job is cancelled),
// `deadline`, or `stall` passes without any change to the job (DEADLINE_EXCEEDED
// either way). `print` gets each progress line. UNIMPLEMENTED from SubmitJob
// means this learner has no job API.
absl::StatusOr<v1::Job> RunJob(const std::string& address, const v1::JobSpec& spec, absl::Time deadline,
                               absl::Duration stall, const std::atomic<bool>& stop,
                               const std::function<void(const std::string&)>& print);

}  // namespace kernelrl::up

#endif  // KERNELRL_TOOLS_CLI_UP_JOB_H_
