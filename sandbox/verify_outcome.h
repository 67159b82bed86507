// The verify stage's verdict rules: from the facts the zygote gathered (the
// supervisor's report on the candidate process tree, the reference process's
// report of every call it drove) to a Verdict outcome, summary and flags.
// The harness decides nothing; every rule is here, under gtest
// (tests/verify_outcome_test.cc), beside the profile stage's (judge.cc).
//
// Rules, first match wins:
//   reference process raised          -> INFRA_ERROR (our fault)
//   SIGSYS                            -> SANDBOX_VIOLATION, seccomp_kill
//   candidate error "violation"       -> SANDBOX_VIOLATION, audit_violation
//   a hack flag, or error "torch_op"  -> HACK_DETECTED
//   resident-memory cap / cgroup OOM  -> CRASH, host_memory_cap
//   wall limit / SIGXCPU              -> TIMEOUT
//   CUDA error (or kernel error on CUDA) -> CUDA_ERROR
//   error "oom"                       -> CRASH, oom
//   any other candidate error, signal -> CRASH
//   inputs written                    -> WRONG_ANSWER, input_mutation
//   outputs changed after "done"      -> HACK_DETECTED, output_written_after_done
//   a set wrong                       -> WRONG_ANSWER
//   a timed forward wrong             -> WRONG_ANSWER, recheck_failed
//   nonzero exit before every set     -> CRASH
//   every set right and "done"        -> OK
//   stopped early / while profiled    -> CRASH
//   otherwise                         -> INFRA_ERROR
// Flags: the candidate's flags plus the rule's own, sorted, no repeats.
#ifndef KERNELRL_SANDBOX_VERIFY_OUTCOME_H_
#define KERNELRL_SANDBOX_VERIFY_OUTCOME_H_

#include <string>
#include <vector>

#include "sandbox/harness_protocol.pb.h"
#include "sandbox/proto_types.h"

namespace kernelrl::sandbox {

struct VerifyOutcome {
  Verdict::Outcome outcome = Verdict::INFRA_ERROR;
  std::string summary;             // capped at 500 bytes
  std::vector<std::string> flags;  // sorted, unique
  int sets_passed = 0;
};

// Candidate flags that alone make the verdict HACK_DETECTED.
const std::vector<std::string>& VerifyHackFlags();

// `job` gives the limits the facts are judged against (num_sets, device,
// wall_seconds, resident/cgroup memory caps). A verify reply without facts is
// INFRA_ERROR (a zygote that could not run the job sends no verify reply at
// all: VerifyStage::Verify returns its error as a Status).
VerifyOutcome DecideVerifyOutcome(const v1::sandbox::HarnessJob& job, const v1::sandbox::HarnessVerifyReply& reply);

// "SIGSEGV" for 11; the number for a signal without a name.
std::string SignalName(int signal);

// The last line of `text` once surrounding whitespace is stripped ("" if none).
std::string LastLine(const std::string& text);

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_VERIFY_OUTCOME_H_
