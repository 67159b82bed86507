#include "tools/cli/up_cmd.h"

#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/gpu_presence.h"
#include "google/protobuf/text_format.h"
#include "grpcpp/grpcpp.h"
#include "common/config.h"
#include "tools/cli/command_line.h"
#include "tools/cli/local_cluster.h"
#include "tools/cli/up_job.h"
#include "tools/cli/up_supervisor.h"

namespace kernelrl::up {
namespace {

using cli::CommandLine;
using cli::Health;
using cli::LocalCluster;
using cli::ServerPorts;
using cli::ResolvePaths;
using cli::ServiceArgs;

namespace fs = std::filesystem;

constexpr char kDefaults[] = R"pb(
  actors: 2
  job: "smoke"
  backend: "auto"
  ready_timeout_s: 180
  job_timeout_s: 1800
  stall_timeout_s: 300
)pb";

const std::map<std::string, std::string> kBinaries = {{"learner", "learner/learner_main"},
                                                      {"sandbox", "sandbox/sandbox_main"},
                                                      {"actor", "actor/actor_main"}};

// The flags of `kernelrl up`, each onto a field of kernelrl.v1.UpConfig.
void AddFlags(CommandLine& cl) {
  cl.Flag("--actors", "actors", "Actor processes");
  cl.Switch("--check", "check", "Report every process's health, then stop");
  cl.Flag("--job", "job", "smoke (the scripted-policy plumbing job), none (run until Ctrl-C) or spec");
  cl.Flag(
      "--job_spec",
      [&cl](const std::string& file) -> absl::StatusOr<std::string> {
        auto path = cl.Assign("job_spec_file", file);
        if (!path.ok()) return path;
        return *path + " job: \"spec\"";
      },
      "Run this kernelrl.v1.JobSpec (text format) instead of the quickstart [job_spec_file, job: spec]");
  cl.Flag("--backend", "backend", "auto, cpu or cuda: the sandbox's backend");
  cl.Flag("--run_dir", "paths.run_dir", "Logs, port files, learner state");
  cl.Flag("--bin_dir", "paths.bin_dir", "Service binaries (bazel-bin)");
  cl.Flag("--repo_dir", "paths.repo_dir", "The source tree");
  cl.Flag("--shared_dir", "shared_dir", "Holds kernelbench/ (the GPU quickstart's tasks)");
  cl.Flag("--ready_timeout_s", "ready_timeout_s", "Seconds for every service to serve");
  cl.Flag("--job_timeout_s", "job_timeout_s", "Seconds for the job");
  cl.Flag("--stall_timeout_s", "stall_timeout_s", "Seconds without a change to the job before failing");
}

absl::Status Validate(const v1::UpConfig& o) {
  if (o.actors() < 0) return absl::InvalidArgumentError("actors: at least 0");
  if (o.job() != "smoke" && o.job() != "none" && o.job() != "spec") {
    return absl::InvalidArgumentError("job: smoke, none or spec");
  }
  if (o.job() == "spec" && o.job_spec_file().empty()) return absl::InvalidArgumentError("job: spec needs job_spec_file");
  if (o.backend() != "auto" && o.backend() != "cpu" && o.backend() != "cuda") {
    return absl::InvalidArgumentError("backend: auto, cpu or cuda");
  }
  return absl::OkStatus();
}

// What the quickstart job trains on, written by tools/cli/up_quickstart.py.
struct QuickstartAssets {
  std::string model_dir, task_set, solutions_dir, skill_path;
};

// CPU: the CPU-sized tasks and their C++ solutions. GPU: KernelBench level 1
// (from shared_dir) and the CUDA solutions.
absl::StatusOr<QuickstartAssets> MakeQuickstartAssets(const std::string& repo, const std::string& run_dir,
                                                      const std::string& shared_dir, bool gpu) {
  const std::string out = run_dir + "/quickstart";
  QuickstartAssets assets{out + "/model", out + "/tasks.jsonl",
                          repo + (gpu ? "/sandbox/solutions/level1" : "/sandbox/solutions/cpu"),
                          repo + "/sandbox/SKILL.md"};
  if (access((assets.model_dir + "/tokenizer.json").c_str(), R_OK) == 0 && access(assets.task_set.c_str(), R_OK) == 0) {
    return assets;  // Made by an earlier run in this directory.
  }
  const std::string cmd =
      absl::StrCat("python3 '", repo, "/tools/cli/up_quickstart.py' '", out, "' '", repo, "'",
                   gpu ? absl::StrCat(" '--gpu=", shared_dir, "'") : "", " > '", run_dir, "/quickstart.log' 2>&1");
  if (system(cmd.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("tools/cli/up_quickstart.py failed; see ", run_dir, "/quickstart.log"));
  }
  return assets;
}

// Prints supervisor events and progress with the time since start, to stdout and
// up.log, and keeps up.status current.
class Console {
 public:
  explicit Console(const std::string& run_dir)
      : run_dir_(run_dir), log_(run_dir + "/up.log", std::ios::app), start_(absl::Now()) {}

  void Line(const std::string& text) {
    absl::MutexLock lock(&mu_);
    const std::string line =
        absl::StrFormat("[up %6.1fs] %s\n", absl::ToDoubleSeconds(absl::Now() - start_), text);
    std::cout << line << std::flush;
    log_ << line << std::flush;
  }

  void Event(const SupervisorEvent& e) {
    std::string text;
    switch (e.kind) {
      case SupervisorEvent::kStarted:
        text = e.restarts ? absl::StrFormat("%-10s RECOVERED: restarted as pid %d (restart %d)", e.name, e.pid,
                                            e.restarts)
                          : absl::StrFormat("%-10s started, pid %d", e.name, e.pid);
        break;
      case SupervisorEvent::kExited:
        text = absl::StrFormat("%-10s DIED: pid %d, %s, after %.1fs", e.name, e.pid, e.detail, e.uptime_s);
        break;
      case SupervisorEvent::kRestarting:
        text = absl::StrFormat("%-10s restarting %s", e.name, e.detail);
        break;
      case SupervisorEvent::kStopped:
        text = absl::StrFormat("%-10s stopped (%s)", e.name, e.detail);
        break;
      case SupervisorEvent::kGaveUp:
        text = absl::StrFormat("%-10s GAVE UP: %s (log: %s/%s.log)", e.name, e.detail, run_dir_, e.name);
        gave_up_ = true;
        break;
    }
    Line(text);
    absl::MutexLock lock(&mu_);
    Status& s = status_[e.name];
    s.restarts = e.restarts;
    s.pid = e.kind == SupervisorEvent::kStarted ? e.pid : 0;
    s.state = e.kind == SupervisorEvent::kStarted    ? "running"
              : e.kind == SupervisorEvent::kStopped  ? "stopped"
              : e.kind == SupervisorEvent::kGaveUp   ? "gave_up"
                                                     : "restarting";
    if (std::find(order_.begin(), order_.end(), e.name) == order_.end()) order_.push_back(e.name);
    std::ofstream out(run_dir_ + "/up.status.tmp", std::ios::trunc);
    for (const std::string& n : order_) {
      out << n << " " << status_[n].pid << " " << status_[n].restarts << " " << status_[n].state << "\n";
    }
    out.close();
    rename((run_dir_ + "/up.status.tmp").c_str(), (run_dir_ + "/up.status").c_str());
  }

  bool gave_up() const { return gave_up_; }

 private:
  struct Status {
    pid_t pid = 0;
    int restarts = 0;
    std::string state;
  };
  const std::string run_dir_;
  absl::Mutex mu_;
  std::ofstream log_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Status> status_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);
  const absl::Time start_;
  std::atomic<bool> gave_up_{false};
};

struct Process {
  std::string name;     // "learner", "actor-0", ...
  std::string service;  // "learner", "actor", ...
  std::vector<std::string> own_args;
  ServerPorts ports;
};

// The cluster of `kernelrl up` on the shared launcher (local_cluster.h):
// learner, sandbox, then the actors, every one a server.
class Cluster {
 public:
  Cluster(const v1::UpConfig& o, const std::vector<std::string>& sets, std::vector<std::string> actor_args,
          bool gpu, Console* console)
      : o_(o), sets_(sets), actor_args_(std::move(actor_args)), gpu_(gpu), console_(console),
        local_(o.paths().bin_dir(), o.paths().run_dir(), [console](const SupervisorEvent& e) { console->Event(e); }) {}

  absl::Status StartProcess(Process& p, absl::Time deadline) {
    std::vector<std::string> args = p.own_args;
    for (const std::string& a : ServiceArgs(o_, sets_, p.service)) args.push_back(a);
    absl::StatusOr<ServerPorts> ports = local_.StartServer(p.name, kBinaries.at(p.service), args, deadline);
    if (!ports.ok()) return ports.status();
    p.ports = *ports;
    return absl::OkStatus();
  }

  absl::Status Start() {
    const absl::Time deadline = absl::Now() + absl::Seconds(o_.ready_timeout_s());
    console_->Line(gpu_ ? "GPU present: the sandbox evaluates with its CUDA backend"
                        : "no GPU here: the sandbox evaluates with its CPU backend");
    // The learner's jobs, checkpoints and ledger survive its restarts here.
    processes_.push_back({"learner", "learner", {"--set=state_dir=" + o_.paths().run_dir() + "/learner-state"}});
    processes_.push_back({"sandbox", "sandbox", {gpu_ ? "--set=backend=cuda" : "--set=backend=cpu"}});
    for (Process& p : processes_) {
      if (absl::Status s = StartProcess(p, deadline); !s.ok()) return s;
    }
    const std::string learner = processes_[0].ports.Address();
    const std::string sandbox = processes_[1].ports.Address();
    for (int i = 0; i < o_.actors(); ++i) {
      Process actor{absl::StrCat("actor-", i), "actor",
                    {"--set=learner_address=" + learner, "--set=sandbox.target=ipv4:" + sandbox,
                     "--set=policy.address=" + learner, absl::StrCat("--set=actor_id=actor-", i),
                     absl::StrCat("--set=rollout.workspace_root=", o_.paths().run_dir(), "/actor-", i, "-workspaces")}};
      actor.own_args.insert(actor.own_args.begin(), actor_args_.begin(), actor_args_.end());
      processes_.push_back(std::move(actor));
    }
    for (size_t i = 2; i < processes_.size(); ++i) {
      if (absl::Status s = StartProcess(processes_[i], deadline); !s.ok()) return s;
    }
    for (const Process& p : processes_) LocalCluster::WaitServing(p.ports.Address(), deadline);
    return absl::OkStatus();
  }

  // The health table; true if every process is SERVING.
  bool Report() {
    bool all = true;
    console_->Line(absl::StrFormat("%-10s %-7s %-17s %-34s %s", "PROCESS", "PID", "GRPC", "METRICS", "HEALTH"));
    for (const Process& p : processes_) {
      const std::string health = Health(p.ports.Address());
      all = all && health == "SERVING";
      console_->Line(absl::StrFormat("%-10s %-7d %-17s %-34s %s", p.name, local_.supervisor().State(p.name).pid,
                                     p.ports.Address(), absl::StrCat("http://127.0.0.1:", p.ports.metrics, "/metrics"),
                                     health));
    }
    return all;
  }

  // Actors first (they stop leasing and pushing), then the servers.
  void Stop() {
    std::vector<std::string> actors, servers;
    for (const Process& p : processes_) (p.service == "actor" ? actors : servers).push_back(p.name);
    local_.Stop(actors, absl::Seconds(15));
    local_.Stop(servers, absl::Seconds(30));
  }

  std::string Restarts() {
    std::string out;
    for (const Process& p : processes_) absl::StrAppend(&out, " ", p.name, "=", local_.supervisor().State(p.name).restarts);
    return out;
  }

  std::string LearnerAddress() const { return processes_[0].ports.Address(); }

 private:
  const v1::UpConfig& o_;
  const std::vector<std::string>& sets_;
  // Before the cluster's own flags: the policy the actors run (the quickstart's scripted one).
  const std::vector<std::string> actor_args_;
  const bool gpu_;
  Console* console_;
  LocalCluster local_;
  std::vector<Process> processes_;
};

// SIGINT/SIGTERM/SIGHUP set `stop` (blocked here, taken by a sigwait thread, so
// the children, which unblock them, still get their own).
void WatchSignals(std::atomic<bool>* stop) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set, stop] {
    int sig;
    while (sigwait(&set, &sig) == 0) stop->store(true);
  }).detach();
}

}  // namespace

int UpMain(int argc, char** argv) {
  v1::UpConfig o;
  CommandLine cl("up", "The embedded cluster on this machine: learner, sandbox and N actors as supervised "
                 "processes; runs the quickstart job and prints its progress (tools/cli/up_cmd.h).", &o);
  AddFlags(cl);
  if (std::optional<int> code = cl.Parse(argc, argv, kDefaults)) return *code;
  if (absl::Status s = Validate(o); !s.ok()) return cl.Fail(std::string(s.message()));
  v1::JobSpec spec;
  if (o.job() == "spec") {
    std::ifstream in(o.job_spec_file());
    std::stringstream text;
    text << in.rdbuf();
    if (!in) return cl.Fail("job_spec_file: cannot read " + o.job_spec_file());
    if (absl::Status s = MergeTextConfig(text.str(), o.job_spec_file(), &spec); !s.ok()) {
      return cl.Fail(std::string(s.message()));
    }
  }
  if (absl::Status s = ResolvePaths("up", o.mutable_paths()); !s.ok()) return cl.Fail(std::string(s.message()));
  const bool gpu = o.backend() == "cuda" || (o.backend() == "auto" && GpuDevicePresent());
  std::atomic<bool> stop{false};
  WatchSignals(&stop);

  Console console(o.paths().run_dir());
  console.Line("logs and status in " + o.paths().run_dir());
  std::vector<std::string> actor_args;
  // Every mode needs the tokenizer (actors load it at start); the quickstart job
  // also trains the model on the task set.
  {
    const std::string& repo = o.paths().repo_dir();
    const std::string shared = o.shared_dir().empty() ? repo + "/../shared" : o.shared_dir();
    absl::StatusOr<QuickstartAssets> assets = MakeQuickstartAssets(repo, o.paths().run_dir(), shared, gpu);
    if (!assets.ok()) {
      console.Line(std::string(assets.status().message()));
      return 1;
    }
    console.Line(absl::StrCat("quickstart: tiny random model ", assets->model_dir, ", tasks ", assets->task_set,
                              ", scripted policy replaying ", assets->solutions_dir));
    if (o.job() != "spec") spec = QuickstartJobSpec(assets->model_dir, assets->task_set, gpu);
    actor_args = {"--set=policy.kind=scripted", "--set=policy.scripted_solutions_dir=" + assets->solutions_dir,
                  "--set=tokenizer_path=" + assets->model_dir + "/tokenizer.json",
                  "--set=rollout.skill_path=" + assets->skill_path};
  }
  Cluster cluster(o, cl.sets(), actor_args, gpu, &console);
  if (absl::Status s = cluster.Start(); !s.ok()) {
    console.Line("FAILED to start the cluster: " + std::string(s.message()));
    cluster.Stop();
    return 1;
  }
  const bool all_serving = cluster.Report();
  if (o.check()) {
    console.Line(all_serving ? "all services SERVING" : "some services are not serving");
    cluster.Stop();
    return all_serving ? 0 : 1;
  }

  int code = 0;
  std::string job_mode = o.job();
  if (job_mode != "none") {
    const absl::Time t0 = absl::Now();
    absl::StatusOr<v1::Job> job = RunJob(cluster.LearnerAddress(), spec, t0 + absl::Seconds(o.job_timeout_s()),
                                         absl::Seconds(o.stall_timeout_s()), stop,
                                         [&](const std::string& line) { console.Line(line); });
    if (job.ok()) {
      std::istringstream report(FinalReport(*job, absl::Now() - t0));
      for (std::string line; std::getline(report, line);) console.Line(line);
      console.Line("restarts:" + cluster.Restarts());
      code = job->state() == v1::Job::SUCCEEDED ? 0 : 1;
    } else if (absl::IsUnimplemented(job.status())) {
      console.Line(std::string(job.status().message()) + ": the cluster stays up without a job");
      job_mode = "none";
    } else {
      console.Line("job failed: " + std::string(job.status().message()));
      code = 1;
    }
  }
  if (job_mode == "none") {
    console.Line("running; Ctrl-C stops the cluster");
    while (!stop && !console.gave_up()) absl::SleepFor(absl::Milliseconds(200));
    if (console.gave_up()) code = 1;
  }
  console.Line("stopping (SIGTERM: each service drains, then exits)");
  cluster.Stop();
  return code;
}

}  // namespace kernelrl::up
