// The C++ side of data/harness/worker.py: one Python process per worker
// behind two pipes, one JSON request line in, one JSON answer line out.
//
// Contract: Call() returns the answer line or an error; a request that runs
// past its timeout, or a process that died, kills the child and the next
// Call() starts a fresh one (a task that hangs or crashes the interpreter
// costs one candidate, never the run). The child dies with the driver
// (PR_SET_PDEATHSIG), so kill -9 of data_synth leaves no orphans.
// Thread-safety: a PythonWorker is used by one thread at a time; WorkerPool
// hands each worker to exactly one thread.
#ifndef KERNELRL_DATA_PYTHON_WORKER_H_
#define KERNELRL_DATA_PYTHON_WORKER_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "data/data.pb.h"
#include "proto/profiler.pb.h"

namespace kernelrl {

using ::kernelrl::v1::AstDump;
using ::kernelrl::v1::BaselineMeasurement;
using ::kernelrl::v1::FilterConfig;
using ::kernelrl::v1::Inventory;
using ::kernelrl::v1::ProbeFacts;

class PythonWorker {
 public:
  struct Options {
    std::string python = "python3";
    std::string harness_root = ".";  // Holds data/harness and profiler_service/harness.
    int threads = 0;                 // torch intra-op threads (0: torch's default).
    std::string log_path;            // The child's stderr (appended); empty: inherit.
  };
  explicit PythonWorker(Options options);
  ~PythonWorker();
  PythonWorker(const PythonWorker&) = delete;
  PythonWorker& operator=(const PythonWorker&) = delete;

  absl::StatusOr<std::string> Call(const std::string& request_line, double timeout_s);
  int restarts() const { return restarts_; }

 private:
  absl::Status Start();
  void Stop();

  Options options_;
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  std::string pending_;  // Bytes read past the last answer line.
  int restarts_ = -1;
};

// Each worker lives on one thread of the pool for the pool's lifetime: the
// child's death signal is tied to the thread that forked it, so a thread that
// ended would take its worker with it.
class WorkerPool {
 public:
  WorkerPool(const PythonWorker::Options& options, int size);
  ~WorkerPool();
  int size() const { return static_cast<int>(workers_.size()); }
  // Runs fn(worker, job) for every job in [0, jobs) on the pool's threads.
  void ForEach(int64_t jobs, const std::function<void(PythonWorker&, int64_t)>& fn);
  // Runs fn(worker, thread index) once on each worker's own thread; returns when all are done.
  void OnEach(const std::function<void(PythonWorker&, int)>& fn) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop(int i) ABSL_LOCKS_EXCLUDED(mu_);

  std::vector<std::unique_ptr<PythonWorker>> workers_;
  std::vector<std::thread> threads_;
  absl::Mutex mu_;
  const std::function<void(PythonWorker&, int)>* job_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
};

// Typed requests (answers parsed as proto3 JSON; a worker-level failure is an error status).
absl::StatusOr<Inventory> RequestInventory(PythonWorker& w, const std::vector<std::string>& families,
                                           double timeout_s);
absl::StatusOr<AstDump> RequestAst(PythonWorker& w, const std::string& path, double timeout_s);
struct ProbeOptions {
  std::string device = "cpu";
  std::string compile_backend;  // Empty: no compiled run (crawl probes).
  double atol = 1e-2, rtol = 1e-2;
  std::string lock_path;
  int64_t memory_limit_bytes = 0;  // The candidate's grant (data/memory_budget.h); 0: no cap.
  // Eager facts only; the worker keeps the model for RequestCompile, which
  // must follow (to compile, or with drop to release it).
  bool defer_compile = false;
};
absl::StatusOr<ProbeFacts> RequestProbe(PythonWorker& w, const std::string& path, const ProbeOptions& options,
                                        double timeout_s);
// Completes a deferred probe of `path`: its compile facts (compile_max_abs_diff,
// or error_stage "compile"/"oom"), compile_s, peak_bytes; drop: only releases it.
absl::StatusOr<ProbeFacts> RequestCompile(PythonWorker& w, const std::string& path, bool drop, double timeout_s);
struct TimingOptions {
  std::string device = "cpu";
  double budget_s = 0.05;
  int min_samples = 3, max_samples = 20;
  std::string lock_path;
  int64_t memory_limit_bytes = 0;
};
absl::StatusOr<BaselineMeasurement> RequestTiming(PythonWorker& w, const std::string& task_id,
                                                  const std::string& path, const TimingOptions& options,
                                                  double timeout_s,
                                                  ::kernelrl::v1::TimingDiagnostics* diagnostics = nullptr);

}  // namespace kernelrl

#endif  // KERNELRL_DATA_PYTHON_WORKER_H_
