#include "actor/shell.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/toolkit.h"
#include "sandbox/contain/roles.h"
#include "sandbox/contain/spawn.h"

namespace kernelrl::actor {
namespace {

// The shell's PATH after the toolkit's bin/: the system's own directories,
// never the actor's PATH (which may name the actor's private installs).
constexpr char kSystemPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void KillTree(pid_t pid) {
  if (pid <= 0) return;
  ::kill(-pid, SIGKILL);  // The process group (isolation off, or no pid namespace).
  ::kill(pid, SIGKILL);   // The supervisor: its pid-1 child dies with it (parent-death signal).
}

int Reap(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Head and tail of a stream too long to keep whole.
class CappedBuffer {
 public:
  explicit CappedBuffer(size_t cap) : half_(std::max<size_t>(cap / 2, 64)) {}
  void Append(absl::string_view s) {
    total_ += s.size();
    if (head_.size() < half_) {
      size_t take = std::min(half_ - head_.size(), s.size());
      head_.append(s.data(), take);
      s.remove_prefix(take);
    }
    tail_.append(s.data(), s.size());
    if (tail_.size() > 2 * half_) tail_.erase(0, tail_.size() - half_);
  }
  // The text with the elided middle marked; `drop_suffix` bytes removed from the end.
  std::string Text(size_t drop_suffix) const {
    std::string all;
    size_t kept = head_.size() + tail_.size();
    if (kept == total_) {
      all = head_ + tail_;
      all.resize(all.size() - std::min(drop_suffix, all.size()));
      return all;
    }
    std::string t = tail_;
    t.resize(t.size() - std::min(drop_suffix, t.size()));
    if (t.size() > half_) t.erase(0, t.size() - half_);
    return absl::StrCat(head_, "\n... [", total_ - head_.size() - t.size() - drop_suffix, " bytes elided] ...\n", t);
  }
  // The last n bytes of the stream.
  std::string Last(size_t n) const {
    std::string all = tail_.empty() ? head_ : (tail_.size() >= n ? tail_ : head_ + tail_);
    return all.size() > n ? all.substr(all.size() - n) : all;
  }
  size_t total() const { return total_; }
  void Clear() {
    head_.clear();
    tail_.clear();
    total_ = 0;
  }

 private:
  const size_t half_;
  std::string head_, tail_;
  size_t total_ = 0;
};

}  // namespace

std::string CapOutput(const std::string& text, size_t cap, size_t elided_extra) {
  if (text.size() <= cap && elided_extra == 0) return text;
  const size_t half = cap / 2;
  if (text.size() <= cap) return absl::StrCat(text, "\n... [", elided_extra, " more bytes elided]");
  return absl::StrCat(text.substr(0, half), "\n... [", text.size() - 2 * half + elided_extra, " bytes elided] ...\n",
                      text.substr(text.size() - half));
}

struct ShellSession::Job {
  pid_t pid = -1;
  int out_fd = -1;
  std::thread reader;
  absl::Mutex mu;
  std::string pending ABSL_GUARDED_BY(mu);
  size_t dropped ABSL_GUARDED_BY(mu) = 0;
  bool running ABSL_GUARDED_BY(mu) = true;
  int exit_code ABSL_GUARDED_BY(mu) = 0;
};

ShellSession::ShellSession(std::string workspace, std::string control_dir, std::vector<std::string> hidden,
                           v1::WorkspaceIsolation isolation, size_t output_cap)
    : workspace_(std::move(workspace)),
      control_dir_(std::move(control_dir)),
      hidden_(std::move(hidden)),
      isolation_(std::move(isolation)),
      output_cap_(output_cap) {}

ShellSession::~ShellSession() {
  KillShell();
  for (auto& [id, job] : jobs_) {
    KillTree(job->pid);
    if (job->reader.joinable()) job->reader.join();
  }
}

absl::StatusOr<pid_t> ShellSession::Spawn(const std::vector<std::string>& argv, int* stdin_fd, int* stdout_fd) {
  sandbox::SpawnOptions opts;
  opts.argv = argv;
  const std::string cuda_home = isolation_.cuda_home().empty() ? kDefaultCudaHome : isolation_.cuda_home();
  opts.env = {absl::StrCat("PATH=", cuda_home, "/bin:", kSystemPath), "HOME=" + workspace_, "LANG=C.UTF-8", "TERM=dumb", "TMPDIR=/tmp"};
  opts.cwd = workspace_;
  const std::string writable = workspace_;
  const std::string hidden = absl::StrJoin(hidden_, ":") +
                             (isolation_.hidden_dirs().empty() ? "" : ":" + absl::StrJoin(isolation_.hidden_dirs(), ":"));
  // The agent shell's switches from the role table (every step asked for,
  // refusals logged); this rollout's directories and limits here.
  sandbox::RoleInputs role;
  role.contain = isolation_.contain();
  opts.policy = sandbox::PolicyFor(sandbox::Role::kAgentShell, /*caps=*/0, role);
  KrPolicy& p = opts.policy;
  if (isolation_.contain()) {
    p.writable_dirs = writable.c_str();
    p.hidden_dirs = hidden.c_str();
    // A private /tmp, unless the workspace itself lives there (the tmpfs would cover it).
    if (!absl::StartsWith(workspace_, "/tmp/")) {
      p.scratch_dir = "/tmp";
      p.scratch_bytes = isolation_.tmp_bytes() > 0 ? isolation_.tmp_bytes() : (int64_t{256} << 20);
    }
    p.cpu_seconds = isolation_.cpu_seconds();
    p.data_bytes = isolation_.data_bytes();
    p.fsize_bytes = isolation_.file_bytes();
    p.nofile = isolation_.max_open_files();
    opts.fail_on_degraded = isolation_.fail_on_degraded();
  }
  absl::StatusOr<sandbox::ContainedProcess> proc = sandbox::StartContained(opts, control_dir_ + "/shell.stderr");
  if (!proc.ok()) return proc.status();
  contain_log_ = proc->contain_log;
  *stdin_fd = proc->stdin_fd;
  *stdout_fd = proc->stdout_fd;
  return proc->pid;
}

absl::Status ShellSession::EnsureShell() {
  if (shell_pid_ > 0) return absl::OkStatus();
  absl::StatusOr<pid_t> pid = Spawn({"bash", "--noprofile", "--norc"}, &shell_in_, &shell_out_);
  if (!pid.ok()) return pid.status();
  shell_pid_ = *pid;
  if (isolation_.contain() && absl::StrContains(contain_log_, "FAILED")) {
    KLOG(WARNING) << "rollout shell runs with degraded isolation: " << contain_log_;
  }
  return absl::OkStatus();
}

void ShellSession::KillShell() {
  if (shell_pid_ <= 0) return;
  KillTree(shell_pid_);
  ::close(shell_in_);
  ::close(shell_out_);
  Reap(shell_pid_);
  shell_pid_ = -1;
  shell_in_ = shell_out_ = -1;
}

absl::StatusOr<ShellResult> ShellSession::Run(const std::string& command, double timeout_seconds) {
  if (absl::Status s = EnsureShell(); !s.ok()) return s;
  static thread_local std::mt19937_64 rng(std::random_device{}());
  const std::string nonce = absl::StrCat(absl::Hex(rng()), absl::Hex(rng()));
  const std::string sentinel = absl::StrCat("__KR_DONE_", nonce, "__");
  // The command travels in a quoted here-document and runs through eval, so
  // any text (unbalanced quotes included) is one command that cannot read the
  // protocol from stdin.
  const std::string script = absl::StrCat("{ eval -- \"$(cat <<'KR_EOF_", nonce, "'\n", command, "\nKR_EOF_", nonce,
                                          "\n)\"; } </dev/null 2>&1\nprintf '\\n%s %d\\n' '", sentinel, "' $?\n");
  ShellResult result;
  size_t off = 0;
  while (off < script.size()) {
    ssize_t n = ::write(shell_in_, script.data() + off, script.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      KillShell();
      result.shell_restarted = true;
      result.exit_code = -1;
      result.output = "the shell had exited; run the command again (a new shell starts in the workspace root)";
      return result;
    }
    off += static_cast<size_t>(n);
  }
  CappedBuffer buf(output_cap_);
  const double deadline = NowSeconds() + timeout_seconds;
  const std::string marker = "\n" + sentinel + " ";
  while (true) {
    const double left = deadline - NowSeconds();
    if (left <= 0) {
      result.timed_out = true;
      break;
    }
    struct pollfd pfd = {shell_out_, POLLIN, 0};
    int r = ::poll(&pfd, 1, static_cast<int>(left * 1000) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) continue;
    char chunk[16384];
    ssize_t n = ::read(shell_out_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {  // The shell exited (e.g. `exit`).
      const pid_t pid = shell_pid_;
      ::close(shell_in_);
      ::close(shell_out_);
      result.exit_code = Reap(pid);
      shell_pid_ = -1;
      result.shell_restarted = true;
      result.output = buf.Text(0);
      return result;
    }
    buf.Append(absl::string_view(chunk, static_cast<size_t>(n)));
    const std::string last = buf.Last(marker.size() + 16);
    if (!last.empty() && last.back() == '\n') {
      size_t at = last.rfind(marker);
      if (at != std::string::npos) {
        int code = 0;
        (void)absl::SimpleAtoi(absl::string_view(last).substr(at + marker.size(),
                                                              last.size() - 1 - at - marker.size()),
                               &code);
        result.exit_code = code;
        result.output = buf.Text(last.size() - at);
        return result;
      }
    }
  }
  KillShell();
  result.shell_restarted = true;
  result.exit_code = -1;
  result.output = buf.Text(0);
  return result;
}

absl::StatusOr<std::string> ShellSession::StartBackground(const std::string& command, int max_jobs) {
  int running = 0;
  for (auto& [id, job] : jobs_) {
    absl::MutexLock l(&job->mu);
    running += job->running;
  }
  if (running >= max_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat(running, " background jobs are running (the limit); stop one with KillBash first"));
  }
  auto job = std::make_unique<Job>();
  int in_fd = -1;
  absl::StatusOr<pid_t> pid = Spawn({"bash", "-c", "exec 2>&1; " + command}, &in_fd, &job->out_fd);
  if (!pid.ok()) return pid.status();
  ::close(in_fd);
  job->pid = *pid;
  Job* j = job.get();
  const size_t cap = output_cap_ * 4;
  job->reader = std::thread([j, cap] {
    char chunk[16384];
    while (true) {
      ssize_t n = ::read(j->out_fd, chunk, sizeof(chunk));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      absl::MutexLock l(&j->mu);
      j->pending.append(chunk, static_cast<size_t>(n));
      if (j->pending.size() > cap) {  // Unread output beyond the cap: keep the newest.
        j->dropped += j->pending.size() - cap;
        j->pending.erase(0, j->pending.size() - cap);
      }
    }
    ::close(j->out_fd);
    const int code = Reap(j->pid);
    absl::MutexLock l(&j->mu);
    j->running = false;
    j->exit_code = code;
  });
  const std::string id = absl::StrCat("bash_", next_job_++);
  jobs_[id] = std::move(job);
  return id;
}

absl::StatusOr<JobOutput> ShellSession::BackgroundOutput(const std::string& id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no background job \"", id, "\""));
  Job& j = *it->second;
  JobOutput out;
  absl::MutexLock l(&j.mu);
  out.output = CapOutput(j.pending, output_cap_, j.dropped);
  if (j.dropped > 0) out.output = absl::StrCat("... [", j.dropped, " older bytes dropped] ...\n", out.output);
  j.pending.clear();
  j.dropped = 0;
  out.running = j.running;
  out.exit_code = j.exit_code;
  return out;
}

absl::Status ShellSession::KillBackground(const std::string& id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no background job \"", id, "\""));
  Job& j = *it->second;
  {
    absl::MutexLock l(&j.mu);
    if (!j.running) return absl::FailedPreconditionError(absl::StrCat(id, " has already finished"));
  }
  KillTree(j.pid);
  if (j.reader.joinable()) j.reader.join();
  return absl::OkStatus();
}

}  // namespace kernelrl::actor
