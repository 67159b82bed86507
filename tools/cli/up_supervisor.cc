#include "tools/cli/up_supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace kernelrl::up {

std::map<std::string, int> ReadPorts(const std::string& path) {
  std::map<std::string, int> ports;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    int port;
    if (eq != std::string::npos && absl::SimpleAtoi(line.substr(eq + 1), &port)) ports[line.substr(0, eq)] = port;
  }
  return ports;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  return absl::StrCat("wait status ", status);
}

Supervisor::Supervisor(RestartPolicy policy, EventFn on_event)
    : policy_(policy), on_event_(std::move(on_event)), thread_([this] { Loop(); }) {}

Supervisor::~Supervisor() {
  StopAll(absl::Seconds(10));
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
  }
  thread_.join();
}

absl::Status Supervisor::Start(const ChildSpec& spec) {
  absl::MutexLock lock(&mu_);
  if (spec.argv.empty()) return absl::InvalidArgumentError(absl::StrCat(spec.name, ": empty argv"));
  if (children_.count(spec.name)) return absl::AlreadyExistsError(absl::StrCat(spec.name, " already started"));
  Child& child = children_[spec.name];
  child.spec = spec;
  child.backoff = policy_.initial_backoff;
  order_.push_back(spec.name);
  // The fork happens on the supervisor's thread: a parent-death signal fires
  // when the *thread* that forked exits, and that thread lives as long as we do.
  child.restart_at = absl::InfinitePast();
  mu_.Await(absl::Condition(
      +[](Child* c) { return c->pid != 0 || c->gave_up || c->restart_at != absl::InfinitePast(); }, &child));
  if (child.gave_up) return absl::FailedPreconditionError(absl::StrCat(spec.name, ": could not be started"));
  return absl::OkStatus();
}

void Supervisor::SetArgv(const std::string& name, std::vector<std::string> argv) {
  absl::MutexLock lock(&mu_);
  auto it = children_.find(name);
  if (it != children_.end()) it->second.spec.argv = std::move(argv);
}

absl::Status Supervisor::SpawnLocked(Child& child) {
  const int log_fd = open(child.spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return absl::InternalError(absl::StrCat("open ", child.spec.log_path, ": ", strerror(errno)));
  std::vector<char*> argv;
  for (const std::string& a : child.spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // The environment is built before fork: the child may only make async-signal-safe calls.
  std::vector<std::string> env_strings = child.spec.env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('=') + 1);
    const bool overridden = std::any_of(child.spec.env.begin(), child.spec.env.end(),
                                        [&](const std::string& o) { return o.compare(0, name.size(), name) == 0; });
    if (!overridden) env_strings.push_back(entry);
  }
  std::vector<char*> envp;
  for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const std::string exec_failed = absl::StrCat("kernelrl up: exec ", child.spec.argv[0], " failed\n");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    setpgid(0, 0);  // Ctrl-C on the terminal reaches the supervisor, which stops us in order.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);  // The supervisor may block SIGTERM/SIGINT.
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, nullptr);
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    syscall(SYS_close_range, 3, ~0U, 0);
    execve(argv[0], argv.data(), envp.data());
    if (write(2, exec_failed.data(), exec_failed.size()) < 0) _exit(127);
    _exit(127);
  }
  close(log_fd);
  child.pid = pid;
  child.started = absl::Now();
  return absl::OkStatus();
}

std::vector<SupervisorEvent> Supervisor::TickLocked() {
  std::vector<SupervisorEvent> events;
  const absl::Time now = absl::Now();
  for (const std::string& name : order_) {
    Child& c = children_[name];
    if (c.pid > 0) {
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
      const absl::Duration uptime = now - c.started;
      SupervisorEvent e{c.stopping ? SupervisorEvent::kStopped : SupervisorEvent::kExited, name, c.pid,
                        DescribeWaitStatus(status), c.restarts, absl::ToDoubleSeconds(uptime)};
      events.push_back(e);
      c.pid = 0;
      if (c.stopping) continue;
      if (uptime >= policy_.stable_after) {
        c.backoff = policy_.initial_backoff;
        c.quick_failures = 0;
      } else if (++c.quick_failures >= policy_.max_quick_failures) {
        c.gave_up = true;
        events.push_back({SupervisorEvent::kGaveUp, name, 0,
                          absl::StrCat(c.quick_failures, " runs in a row shorter than ",
                                       absl::FormatDuration(policy_.stable_after)),
                          c.restarts, 0});
        continue;
      }
      c.restart_at = now + c.backoff;
      events.push_back({SupervisorEvent::kRestarting, name, 0,
                        absl::StrCat("in ", absl::FormatDuration(c.backoff)), c.restarts, 0});
      c.backoff = std::min(c.backoff * 2, policy_.max_backoff);
    } else if (!c.stopping && !c.gave_up && now >= c.restart_at) {
      const bool first = c.restart_at == absl::InfinitePast();
      if (!first) ++c.restarts;
      c.restart_at = absl::InfiniteFuture();
      const absl::Status spawned = SpawnLocked(c);
      if (!spawned.ok()) {
        c.gave_up = true;
        events.push_back({SupervisorEvent::kGaveUp, name, 0, spawned.ToString(), c.restarts, 0});
        continue;
      }
      events.push_back({SupervisorEvent::kStarted, name, c.pid, "", c.restarts, 0});
    }
  }
  return events;
}

void Supervisor::Report(const std::vector<SupervisorEvent>& events) {
  absl::MutexLock lock(&report_mu_);
  if (on_event_) {
    for (const SupervisorEvent& e : events) on_event_(e);
  }
}

void Supervisor::Loop() {
  while (true) {
    std::vector<SupervisorEvent> events;
    {
      absl::MutexLock lock(&mu_);
      events = TickLocked();
      reporting_ = !events.empty();
      if (events.empty()) {
        // Wakes early when Start() asks for a spawn or the destructor says stop.
        mu_.AwaitWithTimeout(absl::Condition(
                                 +[](Supervisor* s) {
                                   s->mu_.AssertHeld();  // Await runs its condition under the lock.
                                   if (s->done_) return true;
                                   for (auto& [n, c] : s->children_) {
                                     if (c.pid == 0 && c.restart_at == absl::InfinitePast()) return true;
                                   }
                                   return false;
                                 },
                                 this),
                             absl::Milliseconds(20));
        if (done_) return;
      }
    }
    if (events.empty()) continue;
    Report(events);
    absl::MutexLock lock(&mu_);
    reporting_ = false;
  }
}

void Supervisor::Stop(const std::vector<std::string>& names, absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& name : names) {
      auto it = children_.find(name);
      if (it == children_.end()) continue;
      it->second.stopping = true;
      if (it->second.pid > 0) kill(it->second.pid, SIGTERM);
    }
  }
  // Polls (the supervisor's thread reaps): true once every named child is gone
  // and the tick that reaped it has reported.
  auto wait_reaped = [&](absl::Time deadline) {
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        bool reaped = !reporting_;
        for (const std::string& name : names) {
          auto it = children_.find(name);
          if (it != children_.end() && it->second.pid > 0) reaped = false;
        }
        if (reaped) return true;
      }
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Milliseconds(20));
    }
  };
  if (wait_reaped(absl::Now() + grace)) return;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& name : names) {
      auto it = children_.find(name);
      if (it != children_.end() && it->second.pid > 0) kill(-it->second.pid, SIGKILL);  // Its whole group.
    }
  }
  wait_reaped(absl::InfiniteFuture());
}

void Supervisor::StopAll(absl::Duration grace) { Stop(Names(), grace); }

ChildState Supervisor::State(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = children_.find(name);
  if (it == children_.end()) return {};
  const Child& c = it->second;
  return {c.pid, c.restarts, c.pid > 0, c.gave_up};
}

std::vector<std::string> Supervisor::Names() const {
  absl::MutexLock lock(&mu_);
  return order_;
}

}  // namespace kernelrl::up
