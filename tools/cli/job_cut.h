// When `kernelrl learn` cuts its job so that the held-out evaluation after the cut still ends by
// --job_timeout_s.
//
// The evaluation after the job (the final one, or a sitting's pause evaluation) scores the last
// policy: it is what the run exists for, and a caller's hard kill just after the limit must not land
// in it. So the limit covers it: the job is cut (or paused) `reserve` before the limit, where
//
//   reserve = kEvalReserveFactor × the longest held-out evaluation the run has timed so far
//
// (before any was timed, the one `kernelrl learn --expected_eval_s` expects; 0 without: the job runs to
// the limit, and the evaluation after it ends past it).
// A cut time already past is now: the job is cut at once, never "earlier than now".
#ifndef KERNELRL_TOOLS_CLI_JOB_CUT_H_
#define KERNELRL_TOOLS_CLI_JOB_CUT_H_

#include <string>

#include "absl/time/time.h"

namespace kernelrl::cli {

// An evaluation after the cut runs about as long as the longest one so far; a quarter more for its
// spread and for cancelling the job and stopping the actors before it.
inline constexpr double kEvalReserveFactor = 1.25;

struct JobCut {
  absl::Time at;           // Cut the job once the clock reaches it; never before the `now` it was computed at.
  absl::Duration reserve;  // Left before the limit for the evaluation after the cut (0: none timed yet).
};

// The cut for a job whose run must end by `limit`, `longest_eval` being the longest held-out
// evaluation timed so far (zero or less: none).
JobCut CutForFinalEvaluation(absl::Time limit, absl::Duration longest_eval, absl::Time now);

// The console line of a cut, seconds counted from the run's `start`: "job cut at 383 s, 83 s before
// the 466 s limit: room for the final evaluation (~83 s: the longest so far 66 s and a quarter)".
// `evaluation` names it ("final evaluation", "pause evaluation"); "" when none follows the job
// (--skip_final_eval: cut at the limit).
std::string DescribeCut(const JobCut& cut, absl::Duration longest_eval, absl::Time limit, absl::Time start,
                        const std::string& evaluation);

}  // namespace kernelrl::cli

#endif  // KERNELRL_TOOLS_CLI_JOB_CUT_H_
