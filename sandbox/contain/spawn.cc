#include "sandbox/contain/spawn.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sandbox/contain/steps.h"

namespace kernelrl::sandbox {
namespace {

// Runs in the forked child: contain, then exec. Never returns.
[[noreturn]] void ChildExec(const SpawnOptions& opts, int log_fd, int in_fd, int out_fd, int err_fd) {
  StepLog log;
  bool ok = ContainPhaseNamespaces(opts.policy, log);
  if (opts.policy.pid_ns) {
    // The next fork is pid 1 of the new namespace; this process stays as its
    // supervisor and mirrors its exit status. Its steps go into the pipe
    // before the fork: written after, they could land behind the inner
    // process's, and the reader takes the log from the view's description on.
    (void)!write(log_fd, log.text().data(), log.text().size());
    log = StepLog();
    pid_t inner = fork();
    if (inner < 0) {
      log.Failed("pid_ns_fork", "fork()", errno, "cannot start");
      (void)!write(log_fd, log.text().data(), log.text().size());
      _exit(126);
    }
    if (inner > 0) {
      close(log_fd);
      close(in_fd);
      close(out_fd);
      close(err_fd);
      int status = 0;
      while (waitpid(inner, &status, 0) < 0 && errno == EINTR) {
      }
      if (WIFSIGNALED(status)) {
        signal(WTERMSIG(status), SIG_DFL);
        kill(getpid(), WTERMSIG(status));
        _exit(128 + WTERMSIG(status));
      }
      _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 127);
    }
  }
  // Descriptors: stdio and the requested passes first, then close the rest.
  dup2(in_fd, 0);
  dup2(out_fd, 1);
  dup2(err_fd, 2);
  std::vector<int> keep = {log_fd};
  for (const auto& [parent_fd, child_fd] : opts.pass_fds) {
    dup2(parent_fd, child_fd);
    keep.push_back(child_fd);
  }
  KrPolicy p = opts.policy;
  p.keep_fds = keep.data();
  p.num_keep_fds = static_cast<int>(keep.size());
  ok &= ContainPhaseChild(p, log);
  ok &= ContainPhaseSeccomp(p, log);
  if (!opts.cwd.empty() && chdir(opts.cwd.c_str()) != 0) {
    log.Failed("chdir", "chdir(" + opts.cwd + ")", errno, "cannot start");
    ok = false;
  }
  (void)!write(log_fd, log.text().data(), log.text().size());
  if (!ok && opts.fail_on_degraded) _exit(126);
  std::vector<char*> argv;
  for (const std::string& a : opts.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& e : opts.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  execvpe(argv[0], argv.data(), envp.data());
  const std::string msg = std::string("exec ") + opts.argv[0] + ": " + std::strerror(errno) + "\n";
  (void)!write(2, msg.data(), msg.size());
  _exit(127);
}

struct Pipes {
  int log[2] = {-1, -1};
  int in[2] = {-1, -1};
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
};

absl::Status MakePipes(Pipes& p) {
  for (int* fds : {p.log, p.in, p.out, p.err}) {
    if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::string ReadAll(int fd) {
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      text.append(buf, n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  return text;
}

absl::StatusOr<pid_t> ForkChild(const SpawnOptions& opts, Pipes& p, int err_fd) {
  if (opts.argv.empty()) return absl::InvalidArgumentError("RunContained: empty argv");
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) ChildExec(opts, p.log[1], p.in[0], p.out[1], err_fd);
  close(p.log[1]);
  close(p.in[0]);
  close(p.out[1]);
  return pid;
}

}  // namespace

absl::StatusOr<SpawnResult> RunContained(const SpawnOptions& opts) {
  Pipes p;
  if (absl::Status s = MakePipes(p); !s.ok()) return s;
  absl::StatusOr<pid_t> pid = ForkChild(opts, p, p.err[1]);
  close(p.err[1]);
  if (!pid.ok()) return pid.status();
  close(p.in[1]);  // no stdin for tools
  SpawnResult result;
  // Drain stdout/stderr while the watchdog runs in a helper thread-free loop:
  // poll the pipes with the remaining wall time, then supervise.
  std::string* sinks[2] = {&result.stdout_text, &result.stderr_text};
  int fds[2] = {p.out[0], p.err[0]};
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int open_count = 2;
  while (open_count > 0) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double elapsed = (now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9;
    if (elapsed > opts.wall_seconds) break;
    struct pollfd pfds[2];
    for (int i = 0; i < 2; ++i) pfds[i] = {fds[i], POLLIN, 0};
    int r = poll(pfds, 2, static_cast<int>((opts.wall_seconds - elapsed) * 1000) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0 || !(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[8192];
      ssize_t n = read(fds[i], buf, sizeof(buf));
      if (n <= 0) {
        close(fds[i]);
        fds[i] = -1;
        pfds[i].fd = -1;
        --open_count;
        continue;
      }
      size_t room = opts.max_output_bytes > sinks[i]->size() ? opts.max_output_bytes - sinks[i]->size() : 0;
      if (static_cast<size_t>(n) > room) result.output_truncated = true;
      sinks[i]->append(buf, std::min(room, static_cast<size_t>(n)));
    }
  }
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  double elapsed = (now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9;
  result.status = Supervise(*pid, std::max(0.0, opts.wall_seconds - elapsed));
  result.status.wall_ms += elapsed * 1e3;  // Supervise only saw the tail
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
  result.contain_log = ReadAll(p.log[0]);
  close(p.log[0]);
  return result;
}

absl::StatusOr<ContainedProcess> StartContained(const SpawnOptions& opts, const std::string& stderr_path) {
  Pipes p;
  if (absl::Status s = MakePipes(p); !s.ok()) return s;
  close(p.err[0]);
  close(p.err[1]);
  int err_fd = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (err_fd < 0) return absl::InternalError(absl::StrCat("open ", stderr_path, ": ", std::strerror(errno)));
  absl::StatusOr<pid_t> pid = ForkChild(opts, p, err_fd);
  close(err_fd);
  if (!pid.ok()) return pid.status();
  ContainedProcess proc;
  proc.pid = *pid;
  proc.stdin_fd = p.in[1];
  proc.stdout_fd = p.out[0];
  proc.contain_log = ReadAll(p.log[0]);  // EOF at exec (CLOEXEC) or exit
  close(p.log[0]);
  return proc;
}

}  // namespace kernelrl::sandbox
