// VerifyStage: owns the zygote (harness/zygote.py) of one GPU and runs verify
// and health jobs through it, one at a time. The zygote is started inside the
// isolation sequence (its own user/mount/net/ipc namespaces where the host
// allows) and restarted if it dies; a job that kills it comes back as
// INFRA_ERROR, never as a hang: every read has a deadline.
//
// On CUDA each zygote start asks it for isolation probes and picks the
// isolation every verify job runs under (isolation_calibration.h), then
// probes the CUPTI recorder under it; the hello EnsureStarted returns carries
// the outcome (isolation_dropped_for_cuda, kprof_ok, kprof_error). The zygote
// reports facts; the caller decides the outcome (verify_outcome.h).
//
// Each job gets back the reply its kind names (harness_reply.h) or a Status:
// the zygote's own error (it stays up), or a reply that does not answer the
// job, a missed deadline, a closed pipe (the zygote is stopped and the next
// job starts a fresh one).
#ifndef KERNELRL_SANDBOX_VERIFY_STAGE_H_
#define KERNELRL_SANDBOX_VERIFY_STAGE_H_

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "sandbox/proto_types.h"
#include "proto/sandbox_config.pb.h"
#include "sandbox/harness_protocol.pb.h"
#include "sandbox/isolation_calibration.h"

namespace kernelrl::sandbox {

class VerifyStage {
 public:
  // Answers a verify job's clock request of step "start" or "clock" (harness_protocol.proto
  // HarnessClockRequest): returns once the job may take that step, or with why it may not
  // (granted false). The time it takes is not counted against the job's deadline.
  using ClockFn = std::function<v1::sandbox::HarnessClockGrant(const std::string& step)>;

  // What the start-up probes found: the same for every zygote of a worker (one
  // host, one GPU), and kept across a zygote's restarts, so that no probe runs
  // while jobs use the GPU (the copy probe would decline, and that zygote's jobs
  // would take off the device's peak rates instead of what its siblings measured).
  struct Calibration {
    IsolationMap cuda_isolation;  // empty on CPU
    int profile_thread_allowance = 0;
    double input_copy_rate = 0.0;  // the copy probe's, bytes/us (0: peak)
    double seal_rate = 0.0;
    // The hello's kprof_ok, kprof_error, calibration and isolation_dropped_for_cuda.
    v1::sandbox::HarnessHello hello_part;
  };

  VerifyStage(const SandboxConfig& config, std::string harness_dir, std::string contain_lib, int caps);
  ~VerifyStage();

  // Starts the zygote process if needed and returns at once: a worker spawns
  // all its zygotes together (each imports torch, ~10 s on the GPU machine),
  // then reads each one's hello and has it calibrate, one after another
  // (EnsureStarted). The forks stay on the caller's thread: a zygote's
  // parent-death signal fires when the thread that forked it ends.
  absl::Status Spawn();
  // Starts the zygote, reads its hello and calibrates it, each where not done
  // yet, and returns the hello (capabilities).
  absl::StatusOr<v1::sandbox::HarnessHello> EnsureStarted();
  // The calibration this zygote measured or was given (none before its first start).
  std::optional<Calibration> calibration() const;
  // Takes another zygote's calibration instead of probing (before the first start).
  void UseCalibration(const Calibration& c);
  // Runs `job` as a verify job under the calibrated isolation; `timeout_s`
  // bounds the whole exchange. A job that profiles asks `clock` for its start and for its
  // clock, once each and in that order (a job that asks without one is answered "no turn").
  absl::StatusOr<v1::sandbox::HarnessVerifyReply> Verify(const v1::sandbox::HarnessJob& job, double timeout_s,
                                                         const ClockFn& clock = nullptr);
  // Runs `job` as a health probe.
  absl::StatusOr<v1::sandbox::HarnessHealthReply> Health(const v1::sandbox::HarnessJob& job, double timeout_s);

 private:
  static constexpr double kProbeTimeoutS = 150;  // the zygote waits 90 s for a probe's child

  absl::Status SpawnLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status GreetLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // reads the hello
  // Spawns, greets and calibrates, each where not done yet.
  absl::Status StartLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Probes where this zygote has no calibration yet, then puts it in the hello.
  absl::Status CalibrateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Calibration> ProbeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyCalibrationLocked(v1::sandbox::HarnessJob& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts the zygote if needed and exchanges `job` (its kind set to `kind`).
  absl::StatusOr<v1::sandbox::HarnessResult> RunLocked(v1::sandbox::HarnessJob job, const char* kind,
                                                       double timeout_s, const ClockFn& clock = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One job out, its checked reply back (CheckHarnessReply); a clock request on the way is
  // answered through `clock`.
  absl::StatusOr<v1::sandbox::HarnessResult> ExchangeLocked(const v1::sandbox::HarnessJob& job, double timeout_s,
                                                            const ClockFn& clock = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteLineLocked(const std::string& line) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::string> ReadLineLocked(double timeout_s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SandboxConfig config_;
  const std::string harness_dir_;
  const std::string contain_lib_;
  const int caps_;
  mutable absl::Mutex mu_;
  pid_t pid_ ABSL_GUARDED_BY(mu_) = -1;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;  // the zygote running as pid_ greeted and calibrated
  int to_zygote_ ABSL_GUARDED_BY(mu_) = -1;
  int from_zygote_ ABSL_GUARDED_BY(mu_) = -1;
  std::string buffer_ ABSL_GUARDED_BY(mu_);
  v1::sandbox::HarnessHello hello_ ABSL_GUARDED_BY(mu_);
  std::optional<Calibration> calibration_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_VERIFY_STAGE_H_
