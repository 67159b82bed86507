// ProfileStage: the C++ end of the profile seam (docs/HARNESS.md). After a
// verify job whose reference process saw every set pass and then served the
// candidate's profile phase, it turns what came back into the Verdict's speed
// fields, flags and outcome (the worker then sets the reward from them,
// RewardFor in profiler_service/reward.h):
//
//   trusted (zygote/reference)      untrusted (candidate process)
//   HarnessProfile: started,        ProfileMeasurement JSON: samples, CUPTI
//   re-check counts, wall time      activity, anchor (evidence only)
//                  \                /
//         JudgeProfile(measurement, baseline, task, ProfilerConfig)
//                   (//profiler_service:analysis)
//
// Contract:
//  * The baseline is looked up by BaselineKeyFor(task, device, gpu_model,
//    torch_version) with the worker's own device facts, never the ones the
//    candidate process reported; the measurement's `device` identity and
//    `work` are overwritten with trusted values before judging (the floor then
//    comes from the baseline's speed_of_light_us).
//  * No baseline (or one recorded with an error, without an eager time, or
//    timed anywhere but the executor path: timing_path != "executor"):
//    outcome OK (reward 1: "correct, not benchmarked"), speed-ups 0, flag
//    "baseline_missing", and the summary names the missing key.
//  * The run's backend is the worker's, and "cupti_active" must match whether
//    the worker injected the recorder: integrity checks are skipped for CPU
//    or CUPTI-less runs, so a measurement claiming either when the worker
//    injected CUPTI is edited evidence: HACK_DETECTED ("cupti_claim_mismatch").
//  * Re-check counts in the measurement that differ from the reference's own
//    count mean the evidence was edited: HACK_DETECTED ("recheck_count_mismatch").
//  * "harness: ..." errors, an unreadable measurement, or a phase that never
//    started are our fault: INFRA_ERROR.
// Stateless apart from the on-disk baseline cache it reads; thread-safe.
#ifndef KERNELRL_SANDBOX_PROFILE_STAGE_H_
#define KERNELRL_SANDBOX_PROFILE_STAGE_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/profiler.pb.h"
#include "proto/profiler_config.pb.h"
#include "sandbox/harness_protocol.pb.h"
#include "sandbox/proto_types.h"

namespace kernelrl::sandbox {

struct DeviceFacts {
  std::string device;         // "cuda" or "cpu": where the candidate ran
  std::string gpu_model;      // health probe's torch.cuda.get_device_name, "cpu" on the CPU backend
  std::string torch_version;  // the zygote's torch.__version__
  bool cupti_injected = false;  // the candidate process was started with the CUPTI recorder
  bool tf32 = false;            // the task's precision policy is tf32: its baselines ran with TF32 on
};

class ProfileStage {
 public:
  // `config` gets the profiler's defaults applied; `baseline_dir` is the cache root.
  ProfileStage(const v1::ProfilerConfig& config, std::string baseline_dir);

  // Fills `v` (already OK from verify) from the verify reply's profile phase `profile`:
  // outcome, speed-ups, times, speed-of-light ratio, coverage, flags,
  // quarantined, summary (verify summary + "; profile: ..."), and appends a
  // "profile" StageTiming.
  void Judge(const v1::sandbox::HarnessProfile& profile, const Task& task, const DeviceFacts& facts,
             Verdict& v) const;

  const std::string& baseline_dir() const { return baseline_dir_; }

  // The candidate's timing run as the reference process recorded it.
  absl::StatusOr<v1::RawTimingRun> CandidateRun(const v1::sandbox::HarnessProfile& profile) const;
  // The whole measurement of a profile phase that ran (a baseline job's:
  // Evaluator::MeasureBaseline), with the device identity and backend the
  // worker's facts, as Judge sets them.
  absl::StatusOr<v1::ProfileMeasurement> Measurement(const v1::sandbox::HarnessProfile& profile,
                                                     const DeviceFacts& facts) const;
  // "More than X faster" for RewardFor, with the profiler's default applied.
  double milestone_margin() const { return config_.milestone_margin(); }

 private:
  v1::ProfilerConfig config_;
  const std::string baseline_dir_;
};

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_PROFILE_STAGE_H_
