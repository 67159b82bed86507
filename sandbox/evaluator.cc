#include "sandbox/evaluator.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/file.h"
#include "common/log.h"
#include "common/toolkit.h"
#include "google/protobuf/util/json_util.h"
#include "profiler_service/judge.h"
#include "profiler_service/profiler_defaults.h"
#include "profiler_service/reward.h"
#include "profiler_service/task_key.h"
#include "sandbox/child_env.h"
#include "sandbox/contain/contain.h"
#include "sandbox/contain/echo.h"
#include "sandbox/verdict_text.h"
#include "sandbox/verify_outcome.h"
#include "sandbox/workspace.h"
#include "sandbox/workspace_files.h"

namespace kernelrl::sandbox {
namespace {

using v1::sandbox::HarnessJob;
using v1::sandbox::HarnessHealthReply;
using v1::sandbox::HarnessHello;
using v1::sandbox::HarnessVerifyReply;


void AddStage(Verdict& v, const std::string& stage, double wall_ms, double cpu_ms = 0, bool cache_hit = false) {
  StageTiming* t = v.add_stages();
  t->set_stage(stage);
  t->set_wall_ms(wall_ms);
  t->set_cpu_ms(cpu_ms);
  t->set_cache_hit(cache_hit);
}

std::string Tail(const std::string& s, size_t n) { return CapTail(s, n); }  // says when it cut

// Job directories are work_root/job-<worker pid>-<n>. A worker killed
// mid-job (SIGKILL, a cut device run) leaves its directory behind; a new
// worker on the same work_root removes those of dead pids at start, and its
// own names never collide with them.
void RemoveStaleJobDirs(const std::string& work_root) {
  DIR* d = opendir(work_root.c_str());
  if (d == nullptr) return;
  std::vector<std::string> stale;
  while (dirent* e = readdir(d)) {
    long pid = 0;
    char rest[8];
    if (sscanf(e->d_name, "job-%ld-%7s", &pid, rest) != 2 || pid <= 0) continue;
    if (pid == getpid() || kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    stale.push_back(work_root + "/" + e->d_name);
  }
  closedir(d);
  for (const std::string& dir : stale) {
    KLOG(INFO) << "sandbox: removing " << dir << " (left by a worker that is gone)";
    if (absl::Status s = RemoveTree(dir); !s.ok()) {
      KLOG(WARNING) << "sandbox: " << s.message();
    }
  }
}

// Secret seeds: fresh from the OS for every evaluation, never from the Task.
std::vector<uint32_t> FreshSeeds(int n) {
  std::random_device rd;
  std::vector<uint32_t> seeds;
  for (int i = 0; i < n; ++i) seeds.push_back(rd());
  return seeds;
}

constexpr char kProtocolFile[] = "protocol.json";  // sandbox/harness/reference.py reads it

// The fields of a verify job that only the reference process may hold.
HarnessJob ProtocolOf(const HarnessJob& job) {
  HarnessJob p;
  p.set_num_sets(job.num_sets());
  *p.mutable_distributions() = job.distributions();
  p.set_atol(job.atol());
  p.set_rtol(job.rtol());
  *p.mutable_atol_scaled_dists() = job.atol_scaled_dists();
  p.set_precision(job.precision());
  p.set_precision_ratio(job.precision_ratio());
  p.set_precision_floor_units(job.precision_floor_units());
  p.set_precision_max_hi_bytes(job.precision_max_hi_bytes());
  if (job.has_profiler()) *p.mutable_profiler() = job.profiler();
  return p;
}

HarnessJob WithoutProtocol(HarnessJob job) {
  job.clear_num_sets();
  job.clear_distributions();
  job.clear_atol();
  job.clear_rtol();
  job.clear_atol_scaled_dists();
  job.clear_precision();
  job.clear_precision_ratio();
  job.clear_precision_floor_units();
  job.clear_precision_max_hi_bytes();
  job.clear_profiler();
  return job;
}

absl::Status WriteProtocol(const HarnessJob& job, const std::string& path) {
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  print.always_print_primitive_fields = true;
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(ProtocolOf(job), &text, print).ok()) {
    return absl::InternalError("cannot serialise the verify protocol");
  }
  return WriteFileAtomically(path, text);
}

TolerancePolicy::Precision PrecisionOf(const Task& task, const SandboxConfig& config) {
  const TolerancePolicy::Precision p = task.tolerance().precision();
  return p != TolerancePolicy::PRECISION_UNSPECIFIED ? p : config.verify().precision();
}

// A job's directories and the reference copies its stages read. A failure
// here is the worker's (full disk, bad work_root), so the verdict is INFRA_ERROR.
absl::Status PrepareJobDir(const std::string& job_dir, const std::string& reference_source, bool baseline) {
  for (const std::string& d : {job_dir, job_dir + "/public", job_dir + "/trusted", job_dir + "/exchange",
                               job_dir + "/scratch"}) {
    if (absl::Status s = MakeDir(d, 0700); !s.ok()) return s;
  }
  if (baseline) {
    if (absl::Status s = MakeDir(job_dir + "/ws", 0700); !s.ok()) return s;
  }
  for (const char* copy : {"/public/model.py", "/trusted/model.py"}) {
    if (absl::Status s = WriteFileAtomically(job_dir + copy, reference_source); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

std::string PrecisionName(TolerancePolicy::Precision precision) {
  switch (precision) {
    case TolerancePolicy::TF32: return "tf32";
    case TolerancePolicy::KERNELBENCH: return "kernelbench";
    default: return "strict";
  }
}

SandboxConfig WithDefaults(SandboxConfig c) {
  if (c.backend().empty()) c.set_backend("cuda");
  if (c.cuda_home().empty()) c.set_cuda_home(kDefaultCudaHome);
  ApplyChildEnvironmentDefaults(c.mutable_child_env());
  if (c.worker_id().empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    c.set_worker_id(absl::StrCat(host, "/gpu", c.gpu_index()));
  }
  if (c.work_root().empty()) c.set_work_root(absl::StrCat("/tmp/kernelrl-sandbox-", getpid()));
  if (c.cache_dir().empty()) c.set_cache_dir(c.work_root() + "/cache");
  if (c.python().empty()) c.set_python("python3");
  if (c.cxx().empty()) c.set_cxx("g++");
  if (c.nvcc().empty()) {
    const std::string in_home = c.cuda_home() + "/bin/nvcc";
    c.set_nvcc(access(in_home.c_str(), X_OK) == 0 ? in_home : "nvcc");
  }
  if (c.harness_dir().empty()) c.set_harness_dir("sandbox/harness");
  if (c.contain_lib().empty()) c.set_contain_lib("sandbox/contain/libkernelrl_contain.so");
  // Children run in other directories: relative paths are resolved now,
  // against the start directory, else the binary's Bazel runfiles tree.
  char exe[PATH_MAX] = {};
  const ssize_t exe_len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  const std::string runfiles = exe_len > 0 ? std::string(exe, exe_len) + ".runfiles/kernelrl/" : "";
  if (c.kprof_lib().empty()) c.set_kprof_lib("profiler_service/libkprof.so");
  if (c.verify_cuda_lib().empty()) c.set_verify_cuda_lib("sandbox/harness/cuda/libkernelrl_verify_cuda.so");
  VerifyLimits& lim = *c.mutable_verify();
  if (lim.precision() == v1::TolerancePolicy::PRECISION_UNSPECIFIED) lim.set_precision(v1::TolerancePolicy::STRICT);
  if (lim.precision_ratio() <= 0) lim.set_precision_ratio(16);
  if (lim.precision_floor_units() <= 0) lim.set_precision_floor_units(1024);
  if (lim.precision_max_hi_bytes() <= 0) lim.set_precision_max_hi_bytes(int64_t{2} << 30);
  for (std::string* path : {c.mutable_harness_dir(), c.mutable_contain_lib(), c.mutable_kprof_lib(),
                            c.mutable_verify_cuda_lib()}) {
    if (path->empty() || (*path)[0] == '/') continue;
    char resolved[PATH_MAX];
    if (realpath(path->c_str(), resolved) != nullptr || realpath((runfiles + *path).c_str(), resolved) != nullptr) {
      *path = resolved;
    }
  }
  struct stat st;
  if (!c.kprof_lib().empty() && (c.kprof_lib()[0] != '/' || stat(c.kprof_lib().c_str(), &st) != 0)) {
    c.set_kprof_lib("");  // not built here: CUDA-event timing (the zygote logs it)
  }
  if (!c.verify_cuda_lib().empty() && (c.verify_cuda_lib()[0] != '/' || stat(c.verify_cuda_lib().c_str(), &st) != 0)) {
    c.set_verify_cuda_lib("");  // not built here: torch ops and host files (the zygote logs it)
  }
  if (c.profiler_root().empty()) {
    // The repository root the harness dir sits in (source tree or runfiles).
    const std::string root = c.harness_dir() + "/../..";
    char resolved[PATH_MAX];
    if (realpath(root.c_str(), resolved) != nullptr &&
        stat((std::string(resolved) + "/profiler_service/harness/protocol.py").c_str(), &st) == 0) {
      c.set_profiler_root(resolved);
    }
  }
  if (c.baseline_dir().empty()) c.set_baseline_dir(WithProfilerDefaults(c.profiler()).baseline_cache_dir());
  if (c.log_tail_bytes() <= 0) c.set_log_tail_bytes(8192);
  VerifyLimits* v = c.mutable_verify();
  if (v->wall_seconds() <= 0) v->set_wall_seconds(120);
  if (v->host_memory_bytes() <= 0) v->set_host_memory_bytes(int64_t{32} << 30);
  if (v->scratch_bytes() <= 0) v->set_scratch_bytes(int64_t{64} << 20);
  if (v->exchange_bytes() <= 0) v->set_exchange_bytes(int64_t{16} << 30);
  if (v->num_correctness_sets() < 5) v->set_num_correctness_sets(5);
  if (v->health_probe_seconds() <= 0) v->set_health_probe_seconds(60);
  if (v->health_memory_slack_bytes() <= 0) v->set_health_memory_slack_bytes(int64_t{512} << 20);
  if (v->resident_memory_bytes() == 0) v->set_resident_memory_bytes(int64_t{16} << 30);
  if (v->memory_poll_ms() <= 0) v->set_memory_poll_ms(10);
  if (v->memory_cgroup_parent().empty()) v->set_memory_cgroup_parent("/sys/fs/cgroup");
  return c;
}

absl::StatusOr<std::unique_ptr<Evaluator>> Evaluator::Create(const SandboxConfig& raw) {
  SandboxConfig config = WithDefaults(raw);
  if (absl::Status s = CheckChildEnvironment(config.child_env()); !s.ok()) return s;
  KLOG(INFO) << "sandbox: children's environment: " << DescribeChildEnvironment(config.child_env());
  if (!raw.cuda_home().empty() && config.backend() != "cpu" &&
      access((raw.cuda_home() + "/bin/nvcc").c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("SandboxConfig.cuda_home \"", raw.cuda_home(), "\" has no executable bin/nvcc"));
  }
  if (absl::Status s = MakeDir(config.work_root(), 0700); !s.ok()) return s;
  RemoveStaleJobDirs(config.work_root());
  const int caps = ProbeHostCapabilities();
  const std::string missing = DescribeMissingCapabilities(caps);
  if (!missing.empty()) {
    KLOG(WARNING) << "sandbox: host isolation degraded, missing: " << missing;
  }
  for (const std::string& required : config.required_isolation()) {
    if (missing.find(required) != std::string::npos) {
      return absl::FailedPreconditionError(
          absl::StrCat("required isolation step '", required, "' is not available on this host"));
    }
  }
  std::unique_ptr<Evaluator> e(new Evaluator(config, caps));
  // Every zygote's process at once (each imports torch and warms up, no CUDA), then each
  // one's hello; the first probes the host and the GPU (no job uses it yet) and the
  // others take its calibration.
  std::vector<absl::Status> spawned;
  for (const std::unique_ptr<VerifyStage>& z : e->zygotes_) spawned.push_back(z->Spawn());
  auto of_n = [&](size_t i, const absl::Status& s) {
    return e->zygotes_.size() == 1 ? s
                                   : absl::Status(s.code(), absl::StrCat("zygote ", i + 1, " of ", e->zygotes_.size(),
                                                                         ": ", s.message()));
  };
  absl::StatusOr<HarnessHello> hello;
  for (size_t i = 0; i < e->zygotes_.size(); ++i) {
    if (!spawned[i].ok()) return of_n(i, spawned[i]);
    if (i > 0) e->zygotes_[i]->UseCalibration(*e->zygotes_[0]->calibration());
    absl::StatusOr<HarnessHello> h = e->zygotes_[i]->EnsureStarted();
    if (!h.ok()) return of_n(i, h.status());
    if (i == 0) hello = std::move(h);
  }
  e->torch_version_ = hello->torch();
  if (config.enable_profiling()) {
    if (!hello->profiler_error().empty()) {
      KLOG(WARNING) << "sandbox: profiling enabled but the profiler harness does not import ("
                    << hello->profiler_error() << "): correct candidates get INFRA_ERROR from the profile stage";
    } else if (config.backend() != "cpu" && !hello->kprof_ok()) {
      KLOG(WARNING) << "sandbox: CUPTI recorder not used (" << hello->kprof_error()
                    << "): profiled jobs are timed with CUDA events only (flag cupti_inactive); kprof_lib="
                    << config.kprof_lib();
    }
    KLOG(INFO) << "sandbox: profiling on, baselines from " << config.baseline_dir();
  }
  if (!hello->memory_cgroup_error().empty()) {
    const int64_t cap = config.verify().resident_memory_bytes();
    const std::string what = cap > 0 ? absl::StrCat(cap >> 20, " MiB resident") : std::string("no cap configured");
    KLOG(WARNING) << "sandbox: no cgroup memory backstop for candidates (" << hello->memory_cgroup_error()
                  << "): host memory is capped by the watchdog alone (" << what << ")";
  }
  e->kprof_ok_ = hello->kprof_ok();
  e->profiler_error_ = hello->profiler_error();
  if (hello->isolation_dropped_for_cuda_size() > 0) {
    std::string dropped;
    for (const std::string& d : hello->isolation_dropped_for_cuda()) dropped += (dropped.empty() ? "" : ", ") + d;
    KLOG(WARNING) << "sandbox: CUDA does not initialise under [" << dropped
                  << "] on this host: dropped for every job (the probes are logged above and in zygote.log)";
    e->dropped_for_cuda_ = dropped;
    for (const std::string& required : config.required_isolation()) {
      if (dropped.find(required) != std::string::npos) {
        return absl::FailedPreconditionError("required isolation step '" + required + "' breaks CUDA on this host");
      }
    }
  }
  {
    GpuTurns::Turn alone(&e->turns_, GpuTurns::Kind::kAlone);
    Verdict scratch;
    e->HealthProbeLocked(*e->zygotes_[0], scratch);
    if (!e->serving()) {
      return absl::UnavailableError("initial GPU health probe failed: " + scratch.logs().at("health_probe"));
    }
  }
  return e;
}

Evaluator::Evaluator(SandboxConfig config, int caps)
    : config_(std::move(config)),
      caps_(caps),
      compile_(std::make_unique<CompileStage>(config_, config_.harness_dir(), caps)),
      profile_(std::make_unique<ProfileStage>(config_.profiler(), config_.baseline_dir())),
      verdict_cache_(config_.verdict_cache()),
      gpu_lease_(config_.gpu_lease_path()) {
  const int n = std::max(1, config_.verify().parallel_verify_jobs());
  absl::MutexLock l(&pool_mu_);
  for (int i = 0; i < n; ++i) {
    zygotes_.push_back(std::make_unique<VerifyStage>(config_, config_.harness_dir(), config_.contain_lib(), caps));
    free_zygotes_.push_back(zygotes_.back().get());
  }
}

// A job's zygote and its turn on the worker's GPU (gpu_turns.h), in that order: a job waiting for a
// zygote holds no turn, so the clock, which waits for every shared turn to end, never waits for
// jobs that wait for the zygote it holds.
class Evaluator::GpuTurn {
 public:
  GpuTurn(Evaluator* e, GpuTurns::Kind kind) : e_(e) {
    {
      absl::MutexLock l(&e_->pool_mu_);
      e_->pool_mu_.Await(absl::Condition(
          +[](std::vector<VerifyStage*>* free) { return !free->empty(); }, &e_->free_zygotes_));
      zygote_ = e_->free_zygotes_.back();
      e_->free_zygotes_.pop_back();
    }
    turn_.emplace(&e_->turns_, kind);
  }
  ~GpuTurn() {
    turn_.reset();
    absl::MutexLock l(&e_->pool_mu_);
    e_->free_zygotes_.push_back(zygote_);
  }
  VerifyStage& zygote() { return *zygote_; }
  bool alone() const { return turn_->alone(); }
  // The clock token (a job that profiles, before its candidate imports its code).
  bool Start(absl::Duration wait, const std::function<bool()>& first = nullptr) { return turn_->Start(wait, first); }
  // The GPU to this job alone until it ends (its clock, or a health probe).
  void Alone() { turn_->Alone(); }
  // The health probe needs the GPU to itself: a shared turn waits for the others first.
  void ProbeHealth(Verdict& v) {
    if (!turn_->alone()) {
      const double t = MonotonicMs();
      turn_->Alone();
      AddStage(v, "health_probe_queue", MonotonicMs() - t);  // behind the jobs queued for the GPU
    }
    e_->HealthProbeLocked(*zygote_, v);
  }

 private:
  Evaluator* const e_;
  VerifyStage* zygote_ = nullptr;
  std::optional<GpuTurns::Turn> turn_;
};

EvaluatorInfo Evaluator::Info() const {
  EvaluatorInfo info;
  info.compile_in_flight = compile_->in_flight();
  info.compile_waiting = compile_->waiting();
  info.verify_waiting = verify_waiting_.load();
  info.serving = serving_.load();
  info.host_caps = caps_;
  info.missing_isolation = DescribeMissingCapabilities(caps_);
  info.profiling = config_.enable_profiling() && profiler_error_.empty();
  info.cupti = info.profiling && kprof_ok_;
  info.precision = PrecisionName(config_.verify().precision());
  info.cuda_home = config_.cuda_home();
  info.python = config_.python();
  info.nvcc = config_.nvcc();
  info.cxx = config_.cxx();
  info.child_env = DescribeChildEnvironment(config_.child_env());
  const VerdictCache::Stats cache = verdict_cache_.stats();
  info.verdict_cache_hits = cache.hits;
  info.verdict_cache_misses = cache.misses;
  info.verdict_cache_nondeterministic = cache.poisoned;
  if (!dropped_for_cuda_.empty()) {
    info.missing_isolation += (info.missing_isolation.empty() ? "" : "; ") + std::string("dropped for CUDA: ") +
                              dropped_for_cuda_;
  }
  return info;
}

std::string Evaluator::GpuModel() const {
  absl::MutexLock l(&gpu_model_mu_);
  return gpu_model_;
}

Verdict Evaluator::Evaluate(const EvaluateRequest& request, const ProgressFn& progress,
                            const CancelledFn& cancelled) {
  const double t0 = MonotonicMs();
  const std::string cache_key = verdict_cache_.enabled() ? VerdictCache::Key(request) : "";
  if (std::optional<Verdict> hit = verdict_cache_.enabled() ? verdict_cache_.Lookup(cache_key) : std::nullopt) {
    hit->clear_stages();
    AddStage(*hit, "verdict_cache", MonotonicMs() - t0);
    AddStage(*hit, "total", MonotonicMs() - t0);
    if (progress) progress("done", true, Verdict::Outcome_Name(hit->outcome()));
    return *std::move(hit);
  }
  Verdict v = Run(request, progress, cancelled);
  v.set_worker_id(config_.worker_id());
  v.set_torch_version(torch_version_);
  v.set_gpu_model(GpuModel());
  // The one place a reward is assigned (profiler_service/reward.h).
  v.set_reward(RewardFor(v, profile_->milestone_margin()));
  AddStage(v, "total", MonotonicMs() - t0);
  verdict_cache_.Record(cache_key, v);  // a no-op while the cache is off
  if (progress) progress("done", true, Verdict::Outcome_Name(v.outcome()));
  return v;
}

v1::BaselineMeasurement Evaluator::MeasureBaseline(const Task& task) {
  v1::BaselineMeasurement bm;
  bm.set_task_id(task.id());
  bm.set_timing_path("executor");
  bm.set_protocol(kBaselineProtocol);
  bm.set_measured_at(NowRfc3339());
  const bool cpu = config_.backend() == "cpu";
  const std::string gpu_model = cpu ? "cpu" : GpuModel();
  // The key the profile stage will look this task up by, from the same facts.
  const BaselineKey key = BaselineKeyFor(task, cpu ? "cpu" : "cuda", gpu_model, torch_version_,
                                         PrecisionOf(task, config_) == TolerancePolicy::TF32);
  bm.set_task_hash(key.task_hash);
  bm.set_input_policy_hash(key.input_policy_hash);
  v1::DeviceInfo& device = *bm.mutable_device();
  device.set_gpu_model(gpu_model);
  device.set_torch_version(torch_version_);
  device.set_backend(cpu ? "cpu" : "cuda");
  if (!config_.enable_profiling() || !profiler_error_.empty()) {
    bm.set_error(absl::StrCat("profiling off on this worker", profiler_error_.empty() ? "" : ": " + profiler_error_));
    return bm;
  }
  EvaluateRequest request;
  *request.mutable_task() = task;
  for (const std::string kind : {"eager", "compiled"}) {
    request.set_request_id(absl::StrCat("baseline-", kind));
    v1::ProfileMeasurement m;
    const Verdict v = Run(request, nullptr, nullptr, nullptr, kind, &m);
    v1::RawTimingRun& run = kind == "eager" ? *bm.mutable_eager() : *bm.mutable_compiled();
    if (v.outcome() == Verdict::OK && m.has_candidate()) {
      run = m.candidate();
      if (!run.error().empty()) run.set_error(absl::StrCat(kind, ": ", run.error()));
    } else {
      run.set_error(absl::StrCat(kind, ": ", Verdict::Outcome_Name(v.outcome()), ": ", v.summary().substr(0, 400)));
    }
    run.set_label(kind);
    run.set_backend(device.backend());
    // Both jobs' anchors: the drift reference a candidate's anchor is compared with.
    if (bm.anchor().samples_size() == 0) {
      *bm.mutable_anchor() = m.anchor();
    } else {
      for (const v1::CallSample& sample : m.anchor().samples()) *bm.mutable_anchor()->add_samples() = sample;
    }
    if (kind == "eager") {
      if (m.has_work()) *bm.mutable_work() = m.work();  // measured on the reference process's Model
      device.set_l2_bytes(m.device().l2_bytes());
      device.set_sm_count(m.device().sm_count());
      device.set_peak_dram_bytes_per_s(m.device().peak_dram_bytes_per_s());  // the floor's rate
      if (!run.error().empty()) {
        bm.set_error(run.error());  // no eager time: the task has no baseline; compiling it is moot
        return bm;
      }
    } else {
      for (const StageTiming& st : v.stages()) {
        if (st.stage() == "verify") bm.set_compile_wall_s(st.wall_ms() / 1e3);  // includes the first compile
      }
    }
  }
  return bm;
}

Verdict Evaluator::Run(const EvaluateRequest& request, const ProgressFn& progress, const CancelledFn& cancelled,
                       v1::RawTimingRun* timing,
                       const std::string& baseline, v1::ProfileMeasurement* measured) {
  Verdict v;
  const uint64_t id = job_counter_.fetch_add(1);
  const std::string job_dir = absl::StrCat(config_.work_root(), "/job-", getpid(), "-", id);
  auto note = [&](const std::string& stage, bool finished, const std::string& detail = "") {
    if (progress) progress(stage, finished, detail);
  };
  auto finish = [&](Verdict::Outcome outcome, const std::string& summary) {
    v.set_outcome(outcome);
    v.set_summary(CapHead(summary, 1000));
    if (absl::Status s = RemoveTree(job_dir); !s.ok()) {
      KLOG(WARNING) << "sandbox: " << s.message();
    }
    return v;
  };
  // Why the job ends before `stage`, or "" while its caller is still there.
  auto gone = [&](const std::string& stage) {
    return cancelled && cancelled() ? absl::StrCat(kCallerGone, stage, " stage") : std::string();
  };
  if (!serving_.load()) return finish(Verdict::INFRA_ERROR, "worker is not serving (GPU health probe failed)");

  // 1. Validate (a baseline job has no workspace: its executor runs the task's Model).
  double t = MonotonicMs();
  ValidatedWorkspace ws;
  if (baseline.empty()) {
    note("validate", false);
    WorkspaceRejection rejection;
    const bool valid = ValidateWorkspace(request.workspace(), config_.workspace(), config_.backend(), &ws, &rejection);
    AddStage(v, "validate", MonotonicMs() - t);
    note("validate", true, valid ? Workspace::Layout_Name(ws.layout) : rejection.reason);
    if (!valid) return finish(rejection.outcome, rejection.reason);
  }
  if (request.task().reference_source().empty()) return finish(Verdict::INFRA_ERROR, "task has no reference source");
  if (absl::Status s = PrepareJobDir(job_dir, request.task().reference_source(), !baseline.empty()); !s.ok()) {
    return finish(Verdict::INFRA_ERROR, std::string(s.message()));
  }
  if (baseline.empty()) {
    if (absl::Status s = MaterializeWorkspace(ws, job_dir + "/ws"); !s.ok()) {
      return finish(Verdict::INFRA_ERROR, std::string(s.message()));
    }
  }

  // 2. Compile (CPU; parallel; cached).
  std::string layout = "BASELINE", artifact_dir = job_dir + "/ws";
  if (baseline.empty()) {
    if (std::string why = gone("compile"); !why.empty()) return finish(Verdict::INFRA_ERROR, why);
    note("compile", false);
    absl::StatusOr<CompileResult> built = compile_->Compile(ws, job_dir + "/ws");
    if (!built.ok()) return finish(Verdict::INFRA_ERROR, "compile stage: " + std::string(built.status().message()));
    AddStage(v, "compile", built->wall_ms, built->cpu_ms, built->cache_hit);
    for (const CompileDiagnostic& d : built->diagnostics) *v.add_diagnostics() = d;
    if (!built->log.empty()) (*v.mutable_logs())["compile"] = Tail(built->log, config_.log_tail_bytes());
    note("compile", true, absl::StrCat(built->diagnostics.size(), " diagnostics"));
    if (!built->ok) return finish(built->failure, built->summary);
    layout = Workspace::Layout_Name(ws.layout);
    artifact_dir = built->artifact_dir;
  }

  // 3. Verify (GPU: alone while a clock runs; see gpu_turns.h).
  HarnessJob job;
  job.set_kind("verify");
  job.set_job_id(absl::StrCat(config_.worker_id(), "#", id, request.request_id().empty() ? "" : "/" + request.request_id()));
  job.set_device(config_.backend() == "cpu" ? "cpu" : "cuda");
  job.set_layout(layout);
  job.set_public_model(job_dir + "/public/model.py");
  job.set_reference_model(job_dir + "/trusted/model.py");
  job.set_workspace_dir(job_dir + "/ws");
  job.set_artifact_dir(artifact_dir);
  job.set_exchange_dir(job_dir + "/exchange");
  job.set_scratch_dir(job_dir + "/scratch");
  job.set_trusted_dir(job_dir + "/trusted");
  const InputPolicy& ip = request.task().inputs();
  const int sets = std::max(config_.verify().num_correctness_sets(), ip.num_correctness_sets());
  job.set_num_sets(sets);  // the seeds themselves are drawn by the reference process
  job.set_init_seed(FreshSeeds(1)[0]);
  if (ip.distributions().empty()) {
    for (const std::string& d : DefaultDistributions()) job.add_distributions(d);
  } else {
    for (const std::string& d : ip.distributions()) job.add_distributions(d);
  }
  const TolerancePolicy& tol = request.task().tolerance();
  job.set_atol(tol.atol() > 0 ? tol.atol() : 1e-2);
  job.set_rtol(tol.rtol() > 0 ? tol.rtol() : 1e-2);
  job.add_atol_scaled_dists("large_magnitude");  // harness_protocol.proto says why
  const VerifyLimits& lim = config_.verify();
  const TolerancePolicy::Precision precision = PrecisionOf(request.task(), config_);
  job.set_precision(PrecisionName(precision));
  job.set_precision_ratio(lim.precision_ratio());
  job.set_precision_floor_units(lim.precision_floor_units());
  job.set_precision_max_hi_bytes(lim.precision_max_hi_bytes());
  job.set_baseline_tf32(!baseline.empty() && precision == TolerancePolicy::TF32);
  v.set_precision_policy(job.precision());
  job.set_wall_seconds(lim.wall_seconds());
  job.set_host_memory_bytes(lim.host_memory_bytes());
  if (lim.resident_memory_bytes() > 0 && baseline.empty()) {  // a baseline executor runs trusted code
    job.set_resident_memory_bytes(lim.resident_memory_bytes());
    job.set_cgroup_memory_bytes(lim.resident_memory_bytes() + lim.exchange_bytes());
  }
  job.set_memory_poll_ms(lim.memory_poll_ms());
  job.set_scratch_bytes(lim.scratch_bytes());
  job.set_exchange_bytes(lim.exchange_bytes());
  job.set_log_tail_bytes(config_.log_tail_bytes());
  job.set_profile(config_.enable_profiling() && (!request.skip_profile() || !baseline.empty()));
  job.set_baseline(baseline);
  if (job.profile()) {
    job.set_kprof_lib(config_.kprof_lib());
    job.set_task_id(request.task().id());
    job.set_task_level(request.task().level());
    *job.mutable_profiler() = WithProfilerDefaults(config_.profiler());
  }
  auto& iso = *job.mutable_isolation();
  for (const char* k : {"user_ns", "pid_ns", "net_ns", "mount_ns", "ipc_ns", "readonly_root", "mount_proc", "seccomp"}) {
    iso[k] = true;
  }
  if (!baseline.empty()) {
    // The task's own code and torch.compile, which runs compilers and writes
    // its caches: no isolation step (the old in-process precompute had none
    // either). The call path and the timing are the candidate's.
    for (const char* k : {"identity", "new_root", "data_limit"}) iso[k] = true;
    for (auto& step : iso) step.second = false;
  }
  verify_waiting_.fetch_add(1);
  note("verify", false, absl::StrCat("queue position ", verify_waiting_.load()));
  t = MonotonicMs();
  const GpuTurns::Kind turn_kind = zygotes_.size() == 1 ? GpuTurns::Kind::kAlone
                                   : job.profile()        ? GpuTurns::Kind::kClocked
                                                          : GpuTurns::Kind::kShared;
  // Its candidate may wait for one other profiling job's turn before it imports its code.
  if (turn_kind == GpuTurns::Kind::kClocked) job.set_turn_wait_seconds(lim.wall_seconds());
  GpuTurn gpu(this, turn_kind);
  verify_waiting_.fetch_sub(1);
  // The wait for this worker's GPU (its other requests' verify and profile jobs): on a busy
  // worker most of a verdict's wall (a learning run on one H200: ~39 s of ~42 s).
  AddStage(v, "gpu_queue", MonotonicMs() - t);
  note("gpu_queue", true, gpu.alone()     ? "the GPU alone"
                          : job.profile() ? "the GPU shared until the clock"
                                          : "the GPU shared with other verify-only jobs");
  if (!serving_.load()) return finish(Verdict::INFRA_ERROR, "worker is not serving (GPU health probe failed)");
  if (std::string why = gone("verify"); !why.empty()) return finish(Verdict::INFRA_ERROR, why);
  // The protocol (sets, distributions, tolerances, precision, the profiler's
  // knobs) goes to the reference process through the trusted dir, which the
  // candidate's process cannot see; the zygote and its children get the rest.
  if (absl::Status s = WriteProtocol(job, job_dir + "/trusted/" + kProtocolFile); !s.ok()) {
    return finish(Verdict::INFRA_ERROR, std::string(s.message()));
  }
  const HarnessJob sent = WithoutProtocol(job);
  // A job that profiles asks twice (gpu_turns.h): to start, before its candidate imports its
  // code (the learner's lease, which pauses a learner on this GPU, common/gpu_lease.h, then the
  // clock token: one such job at a time from here), then for its clock (the GPU alone). Both
  // are held until the job ends. The driver reports a paused learner's last kernels for a while
  // (ProfilerConfig.gpu_lease_sample_lag_s), which the clock waits out with the GPU idle, the
  // verify sets apart. The lease comes first so that a job queued behind another takes it
  // straight from that one (waiting, it holds the lease's turn file): the learner gets no step
  // in between, and the queued job has nothing to wait out.
  GpuLease::Hold lease;
  double quiet_since_unix_s = 0;
  double turn_wait_ms = 0;
  std::string turn_error;
  auto clock = [&](const std::string& step) {
    v1::sandbox::HarnessClockGrant grant;
    const double at = MonotonicMs();
    if (step == "start") {
      note("start_queue", false);
      double token_at = at;
      auto take_lease = [&] {
        turn_error = gone("profile");
        if (!turn_error.empty()) return false;
        if (!gpu_lease_.enabled()) return true;
        absl::StatusOr<GpuLease::Hold> held = gpu_lease_.Exclusive(absl::Seconds(lim.wall_seconds()));
        token_at = MonotonicMs();
        AddStage(v, "gpu_lease", token_at - at);
        if (!held.ok()) {
          turn_error = std::string(held.status().message());
          return false;
        }
        lease = *std::move(held);
        // A learner idle since well before the grant needs no settling (the reference's lease_settled).
        const absl::Time quiet = gpu_lease_.SharedQuietSince(absl::Now());
        if (quiet != absl::InfinitePast()) quiet_since_unix_s = absl::ToUnixMicros(quiet) * 1e-6;
        return true;
      };
      if (!gpu.Start(absl::Seconds(job.turn_wait_seconds()), take_lease) && turn_error.empty()) {
        turn_error = absl::StrCat("another profiling job held this worker's GPU for more than ",
                                  job.turn_wait_seconds(), " s");
      }
      if (turn_error.empty()) turn_error = gone("profile");  // it may have waited long for the token
      AddStage(v, "start_queue", MonotonicMs() - token_at);
      note("start_queue", true, turn_error);
    } else {
      note("gpu_alone", false);
      gpu.Alone();
      AddStage(v, "clock_queue", MonotonicMs() - at);
      if (turn_error.empty()) turn_error = gone("clock");
      note("gpu_alone", true);
      grant.set_gpu_lease_quiet_since_unix_s(quiet_since_unix_s);
    }
    turn_wait_ms += MonotonicMs() - at;
    grant.set_granted(turn_error.empty());
    grant.set_error(turn_error);
    return grant;
  };
  t = MonotonicMs();
  absl::StatusOr<HarnessVerifyReply> r =
      gpu.zygote().Verify(sent, lim.wall_seconds() + 120, job.profile() ? VerifyStage::ClockFn(clock) : nullptr);
  const double verify_ms = MonotonicMs() - t - turn_wait_ms;
  if (!r.ok()) {
    AddStage(v, "verify", verify_ms);
    gpu.ProbeHealth(v);
    return finish(Verdict::INFRA_ERROR, "verify stage: " + std::string(r.status().message()));
  }
  if (!turn_error.empty()) return finish(Verdict::INFRA_ERROR, turn_error);
  // The profile phase runs inside the verify job; its wall time is its own stage.
  AddStage(v, "verify", verify_ms - r->profile().wall_ms(), r->timings().candidate_cpu_ms());
  // Of the profile stage: the clock's wait for the lease's paused holders to leave the driver's
  // samples, GPU idle (docs/HARNESS.md). Near 0 while profiling jobs take the lease from each other.
  if (r->profile().started()) AddStage(v, "lease_settle", r->profile().lease_settle_ms());
  // The zygote reported facts; the outcome is decided here (verify_outcome.h).
  const VerifyOutcome decided = DecideVerifyOutcome(job, *r);
  for (const std::string& f : decided.flags) v.add_flags(f);
  for (const auto& [k, text] : r->logs()) {
    if (!text.empty()) (*v.mutable_logs())[k] = Tail(text, config_.log_tail_bytes());
  }
  const Verdict::Outcome outcome = decided.outcome;
  note("verify", true, Verdict::Outcome_Name(outcome));
  if (outcome == Verdict::CRASH || outcome == Verdict::CUDA_ERROR || outcome == Verdict::TIMEOUT ||
      outcome == Verdict::INFRA_ERROR) {
    gpu.ProbeHealth(v);
  }
  const std::string summary = decided.summary.empty() ? Verdict::Outcome_Name(outcome) : decided.summary;
  if (outcome != Verdict::OK) return finish(outcome, summary);
  if (!job.profile()) {
    // Profiling off (config or request): correctness alone gives the reward (RewardFor).
    v.add_flags("profile_skipped");
    return finish(outcome, summary);
  }
  v.set_outcome(Verdict::OK);
  v.set_summary(summary);
  note("profile", false);
  const bool cpu = config_.backend() == "cpu";
  const bool cupti = !cpu && kprof_ok_ && profiler_error_.empty() && !config_.kprof_lib().empty();
  const DeviceFacts facts{cpu ? "cpu" : "cuda", cpu ? "cpu" : GpuModel(), torch_version_, cupti,
                          precision == TolerancePolicy::TF32};
  if (!baseline.empty()) {
    // A baseline is measured, not judged: the caller stores it.
    AddStage(v, "profile", r->profile().wall_ms());
    absl::StatusOr<v1::ProfileMeasurement> m = profile_->Measurement(r->profile(), facts);
    if (!m.ok()) return finish(Verdict::INFRA_ERROR, absl::StrCat("profile: ", m.status().message()));
    if (measured != nullptr) *measured = *std::move(m);
    return finish(Verdict::OK, summary);
  }
  profile_->Judge(r->profile(), request.task(), facts, v);
  if (timing != nullptr) {
    if (absl::StatusOr<v1::RawTimingRun> run = profile_->CandidateRun(r->profile()); run.ok()) *timing = *std::move(run);
  }
  note("profile", true, Verdict::Outcome_Name(v.outcome()));
  if (v.outcome() == Verdict::INFRA_ERROR) gpu.ProbeHealth(v);
  return finish(v.outcome(), v.summary());
}

void Evaluator::HealthProbeLocked(VerifyStage& zygote, Verdict& verdict) {
  const double t = MonotonicMs();
  HarnessJob job;
  job.set_wall_seconds(config_.verify().health_probe_seconds());
  job.set_memory_slack_bytes(config_.verify().health_memory_slack_bytes());
  absl::StatusOr<HarnessHealthReply> r = zygote.Health(job, config_.verify().health_probe_seconds() + 30);
  // A dead zygote is restarted once: the probe judges the GPU, not the zygote.
  if (!r.ok()) r = zygote.Health(job, config_.verify().health_probe_seconds() + 150);
  AddStage(verdict, "health_probe", MonotonicMs() - t);
  const bool healthy = r.ok() && r->healthy();
  if (r.ok() && !r->gpu_model().empty()) {
    absl::MutexLock l(&gpu_model_mu_);
    gpu_model_ = r->gpu_model();
  }
  (*verdict.mutable_logs())["health_probe"] =
      r.ok() ? absl::StrCat(healthy ? "healthy" : "UNHEALTHY", r->error().empty() ? "" : ": " + r->error(),
                            r->memory_rule().empty() ? "" : " [memory: " + r->memory_rule() + "]")
             : absl::StrCat("UNHEALTHY: ", r.status().message());
  if (!healthy) {
    serving_.store(false);
    KLOG(ERROR) << "sandbox: GPU health probe failed; worker is NOT_SERVING: " << verdict.logs().at("health_probe");
  }
}

}  // namespace kernelrl::sandbox
