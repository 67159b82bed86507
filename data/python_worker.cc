#include "data/python_worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

extern char** environ;

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "common/log.h"
#include "google/protobuf/util/json_util.h"

namespace kernelrl {
namespace {

template <typename Message>
absl::StatusOr<Message> Parse(const absl::StatusOr<std::string>& line, const char* what) {
  if (!line.ok()) return line.status();
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = true;  // "traceback", measure_task's diagnostics.
  Message m;
  const auto st = google::protobuf::util::JsonStringToMessage(*line, &m, opts);
  if (!st.ok()) return absl::InternalError(absl::StrCat(what, ": unparsable answer: ", st.ToString()));
  return m;
}

}  // namespace

PythonWorker::PythonWorker(Options options) : options_(std::move(options)) {}

PythonWorker::~PythonWorker() { Stop(); }

absl::Status PythonWorker::Start() {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0)
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  const std::string threads = absl::StrCat(options_.threads);
  // The child's environment is built here: between fork and exec only
  // async-signal-safe calls are allowed (other threads may hold malloc's lock).
  std::vector<std::string> env = {"PYTHONPATH=" + options_.harness_root, "PYTHONUNBUFFERED=1"};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "PYTHONPATH=", 11) != 0 && std::strncmp(*e, "PYTHONUNBUFFERED=", 17) != 0)
      env.push_back(*e);
  }
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const char* argv[] = {options_.python.c_str(), "-m", "data.harness.worker", "--threads", threads.c_str(), nullptr};
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    // Dies with the driver, including kill -9 of the driver.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    dup2(in[0], 0);
    dup2(out[1], 1);
    if (!options_.log_path.empty()) {
      const int log = open(options_.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (log >= 0) dup2(log, 2);
    }
    if (chdir(options_.harness_root.c_str()) != 0) _exit(127);
    execvpe(argv[0], const_cast<char* const*>(argv), envp.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  pid_ = pid;
  to_child_ = in[1];
  from_child_ = out[0];
  pending_.clear();
  ++restarts_;
  return absl::OkStatus();
}

void PythonWorker::Stop() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (to_child_ >= 0) close(to_child_);
  if (from_child_ >= 0) close(from_child_);
  pid_ = -1;
  to_child_ = from_child_ = -1;
}

absl::StatusOr<std::string> PythonWorker::Call(const std::string& request_line, double timeout_s) {
  if (pid_ <= 0) {
    const auto st = Start();
    if (!st.ok()) return st;
  }
  const std::string line = request_line + "\n";
  size_t sent = 0;
  while (sent < line.size()) {
    const ssize_t n = write(to_child_, line.data() + sent, line.size() - sent);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Stop();
      return absl::UnavailableError(absl::StrCat("worker write: ", std::strerror(errno)));
    }
    sent += static_cast<size_t>(n);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3));
  while (true) {
    const size_t nl = pending_.find('\n');
    if (nl != std::string::npos) {
      std::string answer = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return answer;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      Stop();
      return absl::DeadlineExceededError(absl::StrCat("worker gave no answer in ", timeout_s, " s (killed)"));
    }
    pollfd p{from_child_, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (r < 0 && errno != EINTR) {
      Stop();
      return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
    }
    if (r <= 0) continue;
    char buf[65536];
    const ssize_t n = read(from_child_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Stop();
      return absl::UnavailableError("worker exited without an answer (see its log)");
    }
    pending_.append(buf, static_cast<size_t>(n));
  }
}

WorkerPool::WorkerPool(const PythonWorker::Options& options, int size) {
  for (int i = 0; i < std::max(1, size); ++i) {
    PythonWorker::Options o = options;
    if (!o.log_path.empty()) o.log_path = absl::StrCat(o.log_path, ".", i);
    workers_.push_back(std::make_unique<PythonWorker>(o));
  }
  for (int i = 0; i < this->size(); ++i) threads_.emplace_back([this, i] { Loop(i); });
}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock l(&mu_);
    quit_ = true;
  }
  for (auto& t : threads_) t.join();
  workers_.clear();
}

void WorkerPool::Loop(int i) {
  int64_t seen = 0;
  while (true) {
    const std::function<void(PythonWorker&, int)>* job;
    {
      absl::MutexLock l(&mu_);
      struct Wait {
        WorkerPool* pool;
        int64_t seen;
      } wait{this, seen};
      mu_.Await(absl::Condition(
          +[](Wait* w) {
            w->pool->mu_.AssertHeld();
            return w->pool->quit_ || w->pool->generation_ != w->seen;
          },
          &wait));
      if (quit_) return;
      seen = generation_;
      job = job_;
    }
    (*job)(*workers_[i], i);
    absl::MutexLock l(&mu_);
    --running_;
  }
}

void WorkerPool::ForEach(int64_t jobs, const std::function<void(PythonWorker&, int64_t)>& fn) {
  std::atomic<int64_t> next{0};
  OnEach([&](PythonWorker& w, int) {
    for (int64_t j = next++; j < jobs; j = next++) fn(w, j);
  });
}

void WorkerPool::OnEach(const std::function<void(PythonWorker&, int)>& fn) {
  absl::MutexLock l(&mu_);
  job_ = &fn;
  running_ = size();
  ++generation_;
  mu_.Await(absl::Condition(
      +[](WorkerPool* p) {
        p->mu_.AssertHeld();
        return p->running_ == 0;
      },
      this));
  job_ = nullptr;
}

absl::StatusOr<Inventory> RequestInventory(PythonWorker& w, const std::vector<std::string>& families,
                                           double timeout_s) {
  const Json request = Json::object({{"op", "inventory"}, {"families", families}});
  auto inv = Parse<Inventory>(w.Call(DumpJson(request), timeout_s), "inventory");
  if (inv.ok() && !inv->error().empty()) return absl::InternalError(inv->error());
  return inv;
}

absl::StatusOr<AstDump> RequestAst(PythonWorker& w, const std::string& path, double timeout_s) {
  return Parse<AstDump>(w.Call(DumpJson(Json::object({{"op", "ast"}, {"path", path}})), timeout_s), "ast");
}

absl::StatusOr<ProbeFacts> RequestProbe(PythonWorker& w, const std::string& path, const ProbeOptions& o,
                                        double timeout_s) {
  const Json request = Json::object({{"op", "probe"},
                                     {"path", path},
                                     {"device", o.device},
                                     {"compile_backend", o.compile_backend},
                                     {"atol", o.atol},
                                     {"rtol", o.rtol},
                                     {"lock", o.lock_path},
                                     {"memory_limit_bytes", o.memory_limit_bytes},
                                     {"defer_compile", o.defer_compile}});
  auto facts = Parse<ProbeFacts>(w.Call(DumpJson(request), timeout_s), "probe");
  if (facts.ok() && !facts->error().empty() && facts->error_stage().empty())
    return absl::InternalError(facts->error());  // The worker itself failed, not the task.
  return facts;
}

absl::StatusOr<ProbeFacts> RequestCompile(PythonWorker& w, const std::string& path, bool drop, double timeout_s) {
  const Json request = Json::object({{"op", "compile"}, {"path", path}, {"drop", drop}});
  auto facts = Parse<ProbeFacts>(w.Call(DumpJson(request), timeout_s), "compile");
  if (facts.ok() && !facts->error().empty() && facts->error_stage().empty())
    return absl::InternalError(facts->error());
  return facts;
}

absl::StatusOr<BaselineMeasurement> RequestTiming(PythonWorker& w, const std::string& task_id,
                                                  const std::string& path, const TimingOptions& o,
                                                  double timeout_s, ::kernelrl::v1::TimingDiagnostics* diagnostics) {
  const Json request = Json::object({{"op", "time"},
                                     {"id", task_id},
                                     {"path", path},
                                     {"device", o.device},
                                     {"budget_s", o.budget_s},
                                     {"min_samples", o.min_samples},
                                     {"max_samples", o.max_samples},
                                     {"lock", o.lock_path},
                                     {"memory_limit_bytes", o.memory_limit_bytes}});
  const auto line = w.Call(DumpJson(request), timeout_s);
  if (diagnostics != nullptr) {  // The same line: its lock_wait_s, exclusive_s, peak_bytes.
    auto d = Parse<::kernelrl::v1::TimingDiagnostics>(line, "time");
    if (d.ok()) *diagnostics = *std::move(d);
  }
  return Parse<BaselineMeasurement>(line, "time");
}

}  // namespace kernelrl
