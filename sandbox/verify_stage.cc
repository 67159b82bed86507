#include "sandbox/verify_stage.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "google/protobuf/util/json_util.h"
#include "sandbox/child_env.h"
#include "sandbox/contain/roles.h"
#include "sandbox/contain/spawn.h"
#include "sandbox/filesystem_view.h"
#include "sandbox/harness_reply.h"

namespace kernelrl::sandbox {
namespace {

double NowS() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// write() with SIGPIPE blocked on this thread: a zygote that died leaves its
// stdin without a reader, and SIGPIPE's default action would end the whole
// worker; the write returns EPIPE instead, and the SIGPIPE it left pending
// here is taken back.
ssize_t WriteWithoutSigpipe(int fd, const char* data, size_t n) {
  sigset_t pipe_only, before;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &before);
  const ssize_t written = write(fd, data, n);
  const int error = errno;
  if (written < 0 && error == EPIPE) {
    const struct timespec now = {0, 0};
    while (sigtimedwait(&pipe_only, nullptr, &now) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  errno = error;
  return written;
}

// The reply member `part` of a checked reply (its case is the job's), or the error.
template <typename Reply>
absl::StatusOr<Reply> ReplyPart(absl::StatusOr<v1::sandbox::HarnessResult> r,
                                Reply* (v1::sandbox::HarnessResult::*part)()) {
  if (!r.ok()) return r.status();
  return std::move(*(*r.*part)());
}

}  // namespace

VerifyStage::VerifyStage(const SandboxConfig& config, std::string harness_dir, std::string contain_lib, int caps)
    : config_(config), harness_dir_(std::move(harness_dir)), contain_lib_(std::move(contain_lib)), caps_(caps) {}

VerifyStage::~VerifyStage() {
  absl::MutexLock l(&mu_);
  StopLocked();
}

void VerifyStage::StopLocked() {
  if (to_zygote_ >= 0) close(to_zygote_);
  if (from_zygote_ >= 0) close(from_zygote_);
  to_zygote_ = from_zygote_ = -1;
  if (pid_ > 0) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  pid_ = -1;
  ready_ = false;
  buffer_.clear();
}

absl::Status VerifyStage::StartLocked() {
  if (pid_ < 0) {
    if (absl::Status s = SpawnLocked(); !s.ok()) return s;
  }
  if (ready_) return absl::OkStatus();
  absl::Status s = GreetLocked();
  if (s.ok()) s = CalibrateLocked();
  if (!s.ok()) {
    StopLocked();
    return s;
  }
  ready_ = true;
  return absl::OkStatus();
}

absl::Status VerifyStage::SpawnLocked() {
  SpawnOptions o;
  const std::string python = config_.python().empty() ? "python3" : config_.python();
  o.argv = {python, "-u", harness_dir_ + "/zygote.py", "--contain-lib", contain_lib_, "--device",
            config_.backend() == "cpu" ? "cpu" : "cuda"};
  // The profiler's harness (imported once in the zygote).
  if (!config_.profiler_root().empty()) o.argv.insert(o.argv.end(), {"--profiler-root", config_.profiler_root()});
  if (!config_.verify().memory_cgroup_parent().empty()) {
    o.argv.insert(o.argv.end(), {"--memory-cgroup-parent", config_.verify().memory_cgroup_parent()});
  }
  if (config_.backend() != "cpu" && !config_.verify_cuda_lib().empty()) {
    o.argv.insert(o.argv.end(), {"--verify-cuda-lib", config_.verify_cuda_lib()});
  }
  // The constructed root's configured paths (SandboxConfig.view, checked).
  absl::StatusOr<std::vector<std::string>> view = ZygoteViewArgs(config_);
  if (!view.ok()) return view.status();
  o.argv.insert(o.argv.end(), view->begin(), view->end());
  // SandboxConfig.child_env (resolved by the main), then the zygote's own.
  o.env = ChildEnvList(config_.child_env(),
                       {{"PYTHONDONTWRITEBYTECODE", "1"},
                        {"CUDA_VISIBLE_DEVICES", std::to_string(config_.gpu_index())},
                        {"LC_ALL", "C.UTF-8"},
                        {"OMP_NUM_THREADS", "4"},
                        {"PYTHONPATH", harness_dir_},
                        // torch.cuda.is_available() through NVML: the zygote must never
                        // initialise CUDA, or every forked child fails "re-initialize CUDA".
                        {"PYTORCH_NVML_BASED_CUDA_CHECK", "1"}});
  o.cwd = config_.work_root();
  // The zygote's own namespaces (the role table): no network for anything it
  // forks, and a mount table where it may mount per-job exchange tmpfs.
  RoleInputs zygote;
  zygote.running_as_root = geteuid() == 0;
  o.policy = PolicyFor(Role::kZygote, caps_, zygote);
  o.wall_seconds = 0;
  absl::StatusOr<ContainedProcess> proc = StartContained(o, config_.work_root() + "/zygote.log");
  if (!proc.ok()) return proc.status();
  pid_ = proc->pid;
  to_zygote_ = proc->stdin_fd;
  from_zygote_ = proc->stdout_fd;
  return absl::OkStatus();
}

absl::Status VerifyStage::GreetLocked() {
  absl::StatusOr<std::string> line = ReadLineLocked(120);
  if (!line.ok()) {
    return absl::UnavailableError(absl::StrCat("zygote did not start: ", line.status().message(),
                                               " (see ", config_.work_root(), "/zygote.log)"));
  }
  absl::StatusOr<v1::sandbox::HarnessResult> first = ParseHarnessReply(*line);
  if (!first.ok() || first->reply_case() != v1::sandbox::HarnessResult::kHello) {
    return absl::UnavailableError(absl::StrCat(
        "zygote sent no hello: ", first.ok() ? ReplyCaseName(first->reply_case()) : first.status().message(), ": ",
        line->substr(0, 200)));
  }
  hello_ = std::move(*first->mutable_hello());
  return absl::OkStatus();
}

absl::Status VerifyStage::CalibrateLocked() {
  if (!calibration_) {
    absl::StatusOr<Calibration> c = ProbeLocked();
    if (!c.ok()) return c.status();
    calibration_ = *std::move(c);
  }
  hello_.MergeFrom(calibration_->hello_part);
  return absl::OkStatus();
}

absl::StatusOr<VerifyStage::Calibration> VerifyStage::ProbeLocked() {
  Calibration out;
  v1::sandbox::HarnessHello& part = out.hello_part;
  if (config_.backend() == "cpu") {
    part.set_kprof_error("not a CUDA worker");
    return out;
  }
  const std::map<std::string, bool> caps(hello_.caps().begin(), hello_.caps().end());
  // The zygote failed a probe itself (no answer, or not the probe's): every
  // later probe is skipped and the start fails.
  absl::Status lost;
  auto probe = [&](const char* kind, const IsolationMap& iso, const std::string& kprof_lib) {
    v1::sandbox::HarnessJob job;
    job.set_kind(kind);
    job.set_job_id(kind);
    job.set_device("cuda");
    job.set_kprof_lib(kprof_lib);
    for (const auto& [step, on] : iso) (*job.mutable_isolation())[step] = on;
    v1::sandbox::HarnessResult r;
    mu_.AssertHeld();  // The probes run under the caller's lock; tells the analysis so.
    if (lost.ok()) {
      absl::StatusOr<v1::sandbox::HarnessResult> got = ExchangeLocked(job, kProbeTimeoutS);
      if (got.ok()) r = *std::move(got);
      if (!got.ok()) lost = got.status();
    }
    return r;
  };
  const IsolationCalibration c = CalibrateIsolation(DefaultIsolationPlan(), caps, [&](const IsolationMap& iso) {
    const v1::sandbox::HarnessIsolationProbeReply a = probe("isolation_probe", iso, "").isolation_probe();
    return ProbeAnswer{a.ok(), a.error()};
  });
  for (const CalibrationStep& step : c.log) {
    part.add_calibration(absl::StrCat(step.kind, "=[", absl::StrJoin(step.steps, ","), "] ok=", step.answer.ok,
                                      step.answer.ok ? "" : " " + step.answer.error.substr(0, 300)));
    KLOG(INFO) << "sandbox: CUDA isolation probe " << part.calibration(part.calibration_size() - 1);
  }
  if (!lost.ok()) return absl::UnavailableError(absl::StrCat("zygote failed an isolation probe: ", lost.message()));
  out.cuda_isolation = c.isolation;
  for (const std::string& d : c.dropped) part.add_isolation_dropped_for_cuda(d);
  if (config_.kprof_lib().empty()) {
    part.set_kprof_error("no kprof_lib");
  } else if (!hello_.profiler_error().empty()) {
    part.set_kprof_error("the profiler harness does not import");
  } else {
    // The CUPTI recorder under the isolation candidates get, seccomp included.
    const v1::sandbox::HarnessRecorderProbeReply r =
        probe("recorder_probe", out.cuda_isolation, config_.kprof_lib()).recorder_probe();
    if (!lost.ok()) return absl::UnavailableError(absl::StrCat("zygote failed the recorder probe: ", lost.message()));
    part.set_kprof_ok(r.ok());
    part.set_kprof_error(r.ok() ? "" : r.error());
    part.add_calibration(absl::StrCat("recorder=[", config_.kprof_lib(), "] ok=", r.ok(), " ", r.error()));
    KLOG(INFO) << "sandbox: CUPTI recorder probe " << part.calibration(part.calibration_size() - 1);
    if (r.ok()) out.profile_thread_allowance = r.threads_started();
  }
  // Our in-clock copies at the rates this GPU gives them alone: what the
  // trusted figure takes off (else the device's peak).
  const v1::sandbox::HarnessCopyProbeReply copies = probe("copy_probe", out.cuda_isolation, "").copy_probe();
  if (!lost.ok()) return absl::UnavailableError(absl::StrCat("zygote failed the copy probe: ", lost.message()));
  out.input_copy_rate = copies.ok() ? copies.input_copy_bytes_per_us() : 0.0;
  out.seal_rate = copies.ok() ? copies.seal_bytes_per_us() : 0.0;
  part.add_calibration(absl::StrCat("copies=[", copies.bytes(), " bytes] ok=", copies.ok(), " input ",
                                    copies.input_copy_bytes_per_us(), " seal ", copies.seal_bytes_per_us(), " peak ",
                                    copies.peak_bytes_per_us(), " bytes/us", copies.ok() ? "" : " " + copies.error()));
  KLOG(INFO) << "sandbox: copy probe " << part.calibration(part.calibration_size() - 1);
  return out;
}

void VerifyStage::ApplyCalibrationLocked(v1::sandbox::HarnessJob& job) const {
  if (job.kind() != "verify") return;
  auto& iso = *job.mutable_isolation();
  for (const auto& [step, allowed] : calibration_->cuda_isolation) {
    const auto asked = iso.find(step);
    iso[step] = (asked == iso.end() || asked->second) && allowed;  // a step not asked for stays the default (on)
  }
  // CUPTI only where the recorder ran under this isolation at start.
  if (!hello_.kprof_ok()) job.clear_kprof_lib();
  job.set_profile_thread_allowance(job.kprof_lib().empty() ? 0 : calibration_->profile_thread_allowance);
  job.set_input_copy_bytes_per_us(calibration_->input_copy_rate);
  job.set_seal_bytes_per_us(calibration_->seal_rate);
}

std::optional<VerifyStage::Calibration> VerifyStage::calibration() const {
  absl::MutexLock l(&mu_);
  return calibration_;
}

void VerifyStage::UseCalibration(const Calibration& c) {
  absl::MutexLock l(&mu_);
  calibration_ = c;
}

absl::Status VerifyStage::Spawn() {
  absl::MutexLock l(&mu_);
  return pid_ < 0 ? SpawnLocked() : absl::OkStatus();
}

absl::StatusOr<v1::sandbox::HarnessHello> VerifyStage::EnsureStarted() {
  absl::MutexLock l(&mu_);
  if (absl::Status s = StartLocked(); !s.ok()) return s;
  return hello_;
}

absl::StatusOr<std::string> VerifyStage::ReadLineLocked(double timeout_s) {
  const double deadline = NowS() + timeout_s;
  for (;;) {
    size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    if (buffer_.size() > (4u << 20)) return absl::DataLossError("zygote line too long");
    const double left = deadline - NowS();
    if (left <= 0) return absl::DeadlineExceededError("zygote did not answer in time");
    struct pollfd pfd = {from_zygote_, POLLIN, 0};
    int r = poll(&pfd, 1, static_cast<int>(left * 1000) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[65536];
    ssize_t n = read(from_zygote_, buf, sizeof(buf));
    if (n <= 0) return absl::UnavailableError("zygote exited");
    buffer_.append(buf, n);
  }
}

absl::StatusOr<v1::sandbox::HarnessVerifyReply> VerifyStage::Verify(const v1::sandbox::HarnessJob& job,
                                                                    double timeout_s, const ClockFn& clock) {
  absl::MutexLock l(&mu_);
  return ReplyPart(RunLocked(job, "verify", timeout_s, clock), &v1::sandbox::HarnessResult::mutable_verify);
}

absl::StatusOr<v1::sandbox::HarnessHealthReply> VerifyStage::Health(const v1::sandbox::HarnessJob& job,
                                                                    double timeout_s) {
  absl::MutexLock l(&mu_);
  return ReplyPart(RunLocked(job, "health", timeout_s), &v1::sandbox::HarnessResult::mutable_health);
}

absl::StatusOr<v1::sandbox::HarnessResult> VerifyStage::RunLocked(v1::sandbox::HarnessJob job, const char* kind,
                                                                  double timeout_s, const ClockFn& clock) {
  if (absl::Status s = StartLocked(); !s.ok()) return s;
  job.set_kind(kind);
  ApplyCalibrationLocked(job);
  return ExchangeLocked(job, timeout_s, clock);
}

absl::Status VerifyStage::WriteLineLocked(const std::string& line) {
  for (size_t off = 0; off < line.size();) {
    ssize_t n = WriteWithoutSigpipe(to_zygote_, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      StopLocked();
      return absl::UnavailableError("zygote pipe closed");
    }
    off += n;
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::sandbox::HarnessResult> VerifyStage::ExchangeLocked(const v1::sandbox::HarnessJob& job,
                                                                      double timeout_s, const ClockFn& clock) {
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  print.always_print_primitive_fields = true;
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(job, &text, print).ok()) {
    return absl::InternalError("cannot encode harness job");
  }
  if (absl::Status s = WriteLineLocked(text + "\n"); !s.ok()) return s;
  double deadline = NowS() + timeout_s;
  int steps_asked = 0;  // "start", then "clock"
  for (;;) {
    absl::StatusOr<std::string> line = ReadLineLocked(deadline - NowS());
    if (!line.ok()) {
      StopLocked();  // a zygote that missed its deadline is not trusted again
      return line.status();
    }
    absl::StatusOr<v1::sandbox::HarnessResult> result = ParseHarnessReply(*line);
    if (result.ok() && result->reply_case() == v1::sandbox::HarnessResult::kClockRequest) {
      const std::string& step = result->clock_request().step();
      const char* want = steps_asked == 0 ? "start" : steps_asked == 1 ? "clock" : "";
      if (result->job_id() != job.job_id() || job.kind() != "verify" || step != want) {
        StopLocked();
        return absl::DataLossError(absl::StrCat("zygote asked for step '", step, "' of job '", result->job_id(),
                                                "' while the ", job.kind(), " job '", job.job_id(),
                                                "' could ask for '", want, "'"));
      }
      ++steps_asked;
      v1::sandbox::HarnessClockGrant grant;
      if (clock) {
        // Its wait may be long (the other jobs on the GPU end first), and it takes the worker's
        // turn locks, which are taken before this one everywhere else. The zygote stays this
        // job's meanwhile: the worker hands a zygote to one job at a time.
        const double asked_at = NowS();
        mu_.Unlock();
        grant = clock(step);
        mu_.Lock();
        deadline += NowS() - asked_at;
      } else {
        grant.set_error("this job was given no turn to take");
      }
      grant.set_job_id(job.job_id());
      std::string out;
      if (!google::protobuf::util::MessageToJsonString(grant, &out, print).ok()) {
        return absl::InternalError("cannot encode clock grant");
      }
      if (absl::Status s = WriteLineLocked(out + "\n"); !s.ok()) return s;
      continue;
    }
    absl::Status answers = result.ok() ? CheckHarnessReply(job, *result) : result.status();
    if (!answers.ok() && !absl::IsInternal(answers)) {
      // Not the zygote's own error (Internal) but a line that does not answer
      // this job: later ones may not either, so the next job gets a fresh zygote.
      StopLocked();
    }
    if (!answers.ok()) return answers;
    return result;
  }
}

}  // namespace kernelrl::sandbox
