// Evaluator: the sandbox worker's core, independent of gRPC. One call runs
// validate -> compile (CPU, parallel across calls, content-hash cached) ->
// verify (GPU: a job that profiles has it alone; verify-only jobs may share it,
// VerifyLimits.parallel_verify_jobs) -> profile (same candidate process, judged
// here against the baseline cache; docs/HARNESS.md) and returns a Verdict.
// After a crash, a sticky CUDA error or a timeout it runs a GPU health probe
// before the next job; a failed probe marks the worker not serving.
//
// Invariants: every request gets exactly one Verdict (candidate faults are
// outcomes, our faults are INFRA_ERROR); no process serves two candidates;
// no other job touches the GPU while one profiles; seeds are fresh per call.
#ifndef KERNELRL_SANDBOX_EVALUATOR_H_
#define KERNELRL_SANDBOX_EVALUATOR_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/gpu_lease.h"
#include "sandbox/gpu_turns.h"
#include "sandbox/proto_types.h"
#include "proto/profiler.pb.h"
#include "proto/sandbox.pb.h"
#include "proto/sandbox_config.pb.h"
#include "proto/verdict.pb.h"
#include "sandbox/compile_stage.h"
#include "sandbox/profile_stage.h"
#include "sandbox/verdict_cache.h"
#include "sandbox/verify_stage.h"

namespace kernelrl::sandbox {

// Called when a stage starts (finished = false) and ends.
using ProgressFn = std::function<void(const std::string& stage, bool finished, const std::string& detail)>;
// True once the request's caller has gone (its RPC cancelled: a stopped actor, a cancelled job).
// A worker's queue outlives its callers: without it, a job's cancelled rollouts kept one GPU busy
// with their profiles for ~40 s after their actors stopped, ahead of the final evaluation.
using CancelledFn = std::function<bool()>;
// The summary of a verdict whose caller had gone before a stage that waits for the GPU or uses it.
inline constexpr char kCallerGone[] = "cancelled: its caller went away before the ";

struct EvaluatorInfo {
  int compile_in_flight = 0;
  int compile_waiting = 0;
  int verify_waiting = 0;
  bool serving = true;
  int host_caps = 0;
  std::string missing_isolation;  // human-readable, empty when complete
  bool profiling = false;         // enable_profiling and the profiler harness imports
  bool cupti = false;             // profiled CUDA jobs get the CUPTI recorder
  std::string precision;            // the precision policy of tasks that set none
  std::string cuda_home;            // SandboxConfig.cuda_home: the compiler's CUDA toolkit
  std::string python, nvcc, cxx;    // the tools children run (SandboxConfig, defaults applied)
  std::string child_env;            // "NAME=value, ..." every child starts from (SandboxConfig.child_env)
  int64_t verdict_cache_hits = 0;   // requests served from the verdict cache
  int64_t verdict_cache_misses = 0; // lookups that found nothing (0 while the cache is off)
  int64_t verdict_cache_nondeterministic = 0;  // keys whose fresh verdicts disagreed (never served)
};

class Evaluator {
 public:
  // Probes the host, starts the zygote and runs the first health probe.
  static absl::StatusOr<std::unique_ptr<Evaluator>> Create(const SandboxConfig& config);

  // `cancelled` is asked before each stage that waits for or uses the GPU (compile, the verify's
  // turn, the profile's lease, token and clock): once true the job ends there, INFRA_ERROR with
  // summary kCallerGone + the stage, never cached.
  Verdict Evaluate(const EvaluateRequest& request, const ProgressFn& progress = nullptr,
                   const CancelledFn& cancelled = nullptr);

  // Baselines through the candidate path (docs/HARNESS.md, "Baselines"): the
  // task's own Model (eager), then torch.compile(Model), each run as a verify
  // + profile job whose executor process runs it in place of ModelNew, timed
  // by the same reference-process protocol (input sets, flush, blocks and
  // their trusted clock, CUPTI attribution, drift anchor). Returns what the precompute importer
  // (profiler_service:precompute_baselines) stores, keyed with this worker's
  // own device facts, timing_path "executor"; failures are recorded in it.
  // Needs enable_profiling.
  v1::BaselineMeasurement MeasureBaseline(const Task& task);

  bool serving() const { return serving_.load(); }
  EvaluatorInfo Info() const;
  const SandboxConfig& config() const { return config_; }

 private:
  Evaluator(SandboxConfig config, int caps);
  // `timing` (may be null) receives the candidate's timing run of a profiled OK job.
  // `baseline` "eager"/"compiled": a baseline job (no workspace; the executor
  // runs the task's Model); its measurement goes to `measured`, not to the judge.
  Verdict Run(const EvaluateRequest& request, const ProgressFn& progress, const CancelledFn& cancelled,
              v1::RawTimingRun* timing = nullptr,
              const std::string& baseline = "", v1::ProfileMeasurement* measured = nullptr);
  // Probes the GPU through `zygote` (the one the calling job holds, or any when none runs).
  // The caller holds the GPU alone (a GpuTurns turn).
  void HealthProbeLocked(VerifyStage& zygote, Verdict& verdict);
  class GpuTurn;

  const SandboxConfig config_;
  const int caps_;
  std::unique_ptr<CompileStage> compile_;
  // VerifyLimits.parallel_verify_jobs zygotes (at least one); a job runs on a free one.
  std::vector<std::unique_ptr<VerifyStage>> zygotes_;
  absl::Mutex pool_mu_;  // a zygote is taken before a turn (Evaluator::GpuTurn)
  std::vector<VerifyStage*> free_zygotes_ ABSL_GUARDED_BY(pool_mu_);
  std::unique_ptr<ProfileStage> profile_;
  VerdictCache verdict_cache_;
  const GpuLease gpu_lease_;  // exclusive from a job's clock to its end (config gpu_lease_path)
  GpuTurns turns_;  // who may use the GPU: each job holds a turn for its whole verify (+probe)
  std::atomic<int> verify_waiting_{0};
  std::atomic<bool> serving_{true};
  std::atomic<uint64_t> job_counter_{0};
  // Its own lock, never a turn: a finished verdict reads it, and a shared turn waits behind every
  // queued clock: 4.9 s p50 of a verdict on a busy worker (docs/SANDBOX.md).
  std::string GpuModel() const ABSL_LOCKS_EXCLUDED(gpu_model_mu_);
  mutable absl::Mutex gpu_model_mu_;
  std::string gpu_model_ ABSL_GUARDED_BY(gpu_model_mu_);
  std::string torch_version_;
  std::string dropped_for_cuda_;  // isolation steps CUDA cannot run under here
  bool kprof_ok_ = false;
  std::string profiler_error_;    // why profile_candidate does not import ("" = it does)         // CUPTI recorder ran under the candidate seccomp profile at start
};

// Defaults applied to a config (paths, limits); exposed for tests and the CLI.
SandboxConfig WithDefaults(SandboxConfig config);

// "strict", "tf32" or "kernelbench": a policy's name in jobs, verdicts and reports.
std::string PrecisionName(v1::TolerancePolicy::Precision precision);

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_EVALUATOR_H_
