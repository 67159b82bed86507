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
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "tools/cli/up_job.h"
#include "tools/cli/up_supervisor.h"

namespace kernelrl::up {
namespace {

namespace fs = std::filesystem;

constexpr char kUsage[] =
    "usage: kernelrl up [--actors=N] [--check] [--job=quickstart|none] [--job_spec=FILE]\n"
    "                   [--backend=auto|cpu|cuda] [--run_dir=DIR] [--bin_dir=DIR] [--repo_dir=DIR]\n"
    "                   [--shared_dir=DIR]\n"
    "                   [--ready_timeout_s=S] [--job_timeout_s=S] [--stall_timeout_s=S]\n"
    "                   [--set=SERVICE.FIELD=VALUE ...]\n"
    "Starts learner, sandbox and N actors as supervised processes on this machine,\n"
    "runs the quickstart job and prints its progress (tools/cli/up_cmd.h).\n";

struct UpOptions {
  int actors = 2;
  bool check = false;
  std::string job = "quickstart";
  std::string job_spec_file;
  std::string backend = "auto";
  std::string run_dir;
  std::string bin_dir;
  std::string repo_dir;  // Source tree: tools/cli/up_quickstart.py, sandbox/solutions/cpu.
  std::string shared_dir;  // Holds kernelbench/ (the GPU quickstart's tasks); default <repo>/../shared.
  bool gpu = false;        // Resolved from --backend.
  double ready_timeout_s = 180;
  double job_timeout_s = 1800;
  double stall_timeout_s = 300;  // No change to the job for this long: fail.
  std::map<std::string, std::vector<std::string>> sets;  // service -> ["--set=field=value", ...]
};

const char* const kServices[] = {"learner", "sandbox", "actor"};
const std::map<std::string, std::string> kBinaries = {{"learner", "learner/learner_main"},
                                                      {"sandbox", "sandbox/sandbox_main"},
                                                      {"actor", "actor/actor_main"}};

absl::StatusOr<UpOptions> ParseFlags(int argc, char** argv) {
  UpOptions o;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    auto value = [&](absl::string_view flag, std::string* out) {
      if (!absl::ConsumePrefix(&a, flag)) return false;
      *out = std::string(a);
      return true;
    };
    std::string v;
    if (a == "--help" || a == "-h") {
      return absl::CancelledError("help");
    } else if (a == "--check") {
      o.check = true;
    } else if (value("--actors=", &v)) {
      if (!absl::SimpleAtoi(v, &o.actors) || o.actors < 0) return absl::InvalidArgumentError("--actors: " + v);
    } else if (value("--job=", &o.job)) {
      if (o.job != "quickstart" && o.job != "none") return absl::InvalidArgumentError("--job: quickstart or none");
    } else if (value("--job_spec=", &o.job_spec_file) || value("--run_dir=", &o.run_dir) ||
               value("--bin_dir=", &o.bin_dir) || value("--repo_dir=", &o.repo_dir) ||
               value("--shared_dir=", &o.shared_dir)) {
    } else if (value("--backend=", &o.backend)) {
      if (o.backend != "auto" && o.backend != "cpu" && o.backend != "cuda") {
        return absl::InvalidArgumentError("--backend: auto, cpu or cuda");
      }
    } else if (value("--ready_timeout_s=", &v)) {
      if (!absl::SimpleAtod(v, &o.ready_timeout_s)) return absl::InvalidArgumentError("--ready_timeout_s: " + v);
    } else if (value("--stall_timeout_s=", &v)) {
      if (!absl::SimpleAtod(v, &o.stall_timeout_s)) return absl::InvalidArgumentError("--stall_timeout_s: " + v);
    } else if (value("--job_timeout_s=", &v)) {
      if (!absl::SimpleAtod(v, &o.job_timeout_s)) return absl::InvalidArgumentError("--job_timeout_s: " + v);
    } else if (value("--set=", &v)) {
      const size_t dot = v.find('.');
      const std::string service = v.substr(0, dot);
      if (dot == std::string::npos || !kBinaries.count(service)) {
        return absl::InvalidArgumentError("--set=SERVICE.FIELD=VALUE with SERVICE learner|sandbox|actor: " + v);
      }
      o.sets[service].push_back("--set=" + v.substr(dot + 1));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", a));
    }
  }
  return o;
}

// Where the service binaries are: --bin_dir, the runfiles of this binary, or
// the bazel-bin tree it sits in.
absl::StatusOr<std::string> FindBinDir(const std::string& flag) {
  std::vector<std::string> candidates;
  if (!flag.empty()) candidates.push_back(flag);
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(self.string() + ".runfiles/kernelrl");
    candidates.push_back(self.parent_path().parent_path().parent_path().string());  // bazel-bin/tools/cli/kernelrl
  }
  if (const char* rf = getenv("RUNFILES_DIR")) candidates.push_back(std::string(rf) + "/kernelrl");
  for (const std::string& c : candidates) {
    if (access((c + "/learner/learner_main").c_str(), X_OK) == 0) return c;
  }
  return absl::NotFoundError("service binaries not found (build them, or pass --bin_dir=bazel-bin)");
}

// The source tree: --repo_dir, else the binaries' runfiles (tests), else the
// working directory (tools/run_local.sh runs from the checkout).
std::string FindRepoDir(const std::string& flag, const std::string& bin_dir) {
  if (!flag.empty()) return flag;
  for (const std::string& c : {bin_dir, fs::current_path().string()}) {
    if (access((c + "/tools/cli/up_quickstart.py").c_str(), R_OK) == 0) return c;
  }
  return fs::current_path().string();
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

std::string Health(const std::string& address) {
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status s = stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &response);
  if (!s.ok()) return "UNREACHABLE";
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
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
  int grpc_port = 0, metrics_port = 0;
};

class Cluster {
 public:
  Cluster(const UpOptions& o, std::string bin_dir, std::vector<std::string> actor_args, Console* console)
      : o_(o), bin_dir_(std::move(bin_dir)), actor_args_(std::move(actor_args)), console_(console),
        sup_(RestartPolicy{}, [console](const SupervisorEvent& e) { console->Event(e); }) {}

  std::vector<std::string> Argv(const Process& p) const {
    std::vector<std::string> argv = {bin_dir_ + "/" + kBinaries.at(p.service),
                                     absl::StrCat("--set=server.grpc_port=", p.grpc_port),
                                     absl::StrCat("--set=server.metrics_port=", p.metrics_port),
                                     absl::StrCat("--set=server.port_file=", o_.run_dir, "/", p.name, ".ports"),
                                     // Local: a short drain, so Ctrl-C stops the cluster in seconds.
                                     "--set=server.drain_seconds=0.5", "--set=server.grace_seconds=10"};
    argv.insert(argv.end(), p.own_args.begin(), p.own_args.end());
    auto sets = o_.sets.find(p.service);
    if (sets != o_.sets.end()) argv.insert(argv.end(), sets->second.begin(), sets->second.end());
    return argv;
  }

  // Starts `p` and waits for its port file; then pins its ports for restarts.
  absl::Status StartAndPin(Process& p, absl::Time deadline) {
    const std::string port_file = absl::StrCat(o_.run_dir, "/", p.name, ".ports");
    unlink(port_file.c_str());
    if (absl::Status s = sup_.Start({p.name, Argv(p), absl::StrCat(o_.run_dir, "/", p.name, ".log")}); !s.ok()) {
      return s;
    }
    while (true) {
      std::map<std::string, int> ports = ReadPorts(port_file);
      if (ports.count("grpc_port") && ports.count("metrics_port")) {
        p.grpc_port = ports["grpc_port"];
        p.metrics_port = ports["metrics_port"];
        sup_.SetArgv(p.name, Argv(p));
        return absl::OkStatus();
      }
      if (sup_.State(p.name).gave_up || absl::Now() >= deadline) {
        return absl::UnavailableError(absl::StrCat(p.name, " did not start listening; see ", o_.run_dir, "/", p.name,
                                                   ".log"));
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  }

  absl::Status Start() {
    const absl::Time deadline = absl::Now() + absl::Seconds(o_.ready_timeout_s);
    const bool gpu = o_.gpu;
    console_->Line(gpu ? "GPU present: the sandbox evaluates with its CUDA backend"
                       : "no GPU here: the sandbox evaluates with its CPU backend");
    // The learner's jobs, checkpoints and ledger survive its restarts here.
    processes_.push_back({"learner", "learner", {absl::StrCat("--set=state_dir=", o_.run_dir, "/learner-state")}});
    processes_.push_back({"sandbox", "sandbox", {gpu ? "--set=backend=cuda" : "--set=backend=cpu"}});
    for (Process& p : processes_) {
      if (absl::Status s = StartAndPin(p, deadline); !s.ok()) return s;
    }
    const std::string learner = absl::StrCat("127.0.0.1:", processes_[0].grpc_port);
    const std::string sandbox = absl::StrCat("127.0.0.1:", processes_[1].grpc_port);
    for (int i = 0; i < o_.actors; ++i) {
      Process actor{absl::StrCat("actor-", i), "actor",
                    {"--set=learner_address=" + learner, "--set=policy_address=" + learner,
                     "--set=sandbox_address=" + sandbox, "--set=sandbox.target=ipv4:" + sandbox,
                     "--set=policy.address=" + learner, absl::StrCat("--set=actor_id=actor-", i),
                     absl::StrCat("--set=rollout.workspace_root=", o_.run_dir, "/actor-", i, "-workspaces")}};
      actor.own_args.insert(actor.own_args.end(), actor_args_.begin(), actor_args_.end());
      processes_.push_back(std::move(actor));
    }
    for (size_t i = 2; i < processes_.size(); ++i) {
      if (absl::Status s = StartAndPin(processes_[i], deadline); !s.ok()) return s;
    }
    return WaitServing(deadline);
  }

  absl::Status WaitServing(absl::Time deadline) {
    for (const Process& p : processes_) {
      std::string health;
      while ((health = Health(Address(p))) != "SERVING" && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(200));
    }
    return absl::OkStatus();
  }

  // The health table; true if every process is SERVING.
  bool Report() {
    bool all = true;
    console_->Line(absl::StrFormat("%-10s %-7s %-17s %-34s %s", "PROCESS", "PID", "GRPC", "METRICS", "HEALTH"));
    for (const Process& p : processes_) {
      const std::string health = Health(Address(p));
      all = all && health == "SERVING";
      console_->Line(absl::StrFormat("%-10s %-7d %-17s %-34s %s", p.name, sup_.State(p.name).pid, Address(p),
                                     absl::StrCat("http://127.0.0.1:", p.metrics_port, "/metrics"), health));
    }
    return all;
  }

  // Actors first (they stop leasing and pushing), then the servers.
  void Stop() {
    std::vector<std::string> actors, servers;
    for (const Process& p : processes_) (p.service == "actor" ? actors : servers).push_back(p.name);
    sup_.Stop(actors, absl::Seconds(15));
    sup_.Stop(servers, absl::Seconds(30));
  }

  std::string Restarts() {
    std::string out;
    for (const Process& p : processes_) absl::StrAppend(&out, " ", p.name, "=", sup_.State(p.name).restarts);
    return out;
  }

  std::string LearnerAddress() const { return Address(processes_[0]); }
  static std::string Address(const Process& p) { return absl::StrCat("127.0.0.1:", p.grpc_port); }

 private:
  const UpOptions& o_;
  const std::string bin_dir_;
  const std::vector<std::string> actor_args_;  // The policy the actors run (the quickstart's scripted one).
  Console* console_;
  Supervisor sup_;
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
  absl::StatusOr<UpOptions> parsed = ParseFlags(argc, argv);
  if (absl::IsCancelled(parsed.status())) {
    std::cout << kUsage;
    return 0;
  }
  if (!parsed.ok()) {
    std::cerr << parsed.status().message() << "\n" << kUsage;
    return 2;
  }
  UpOptions o = *parsed;
  v1::JobSpec spec;
  if (!o.job_spec_file.empty()) {
    std::ifstream in(o.job_spec_file);
    std::stringstream text;
    text << in.rdbuf();
    if (!in || !google::protobuf::TextFormat::ParseFromString(text.str(), &spec)) {
      std::cerr << "--job_spec: cannot read a kernelrl.v1.JobSpec from " << o.job_spec_file << "\n";
      return 2;
    }
  }
  absl::StatusOr<std::string> bin_dir = FindBinDir(o.bin_dir);
  if (!bin_dir.ok()) {
    std::cerr << bin_dir.status().message() << "\n";
    return 2;
  }
  if (o.run_dir.empty()) o.run_dir = absl::StrCat("/tmp/kernelrl-up-", getpid());
  std::error_code ec;
  fs::create_directories(o.run_dir, ec);
  if (ec) {
    std::cerr << "--run_dir " << o.run_dir << ": " << ec.message() << "\n";
    return 2;
  }
  o.gpu = o.backend == "cuda" || (o.backend == "auto" && GpuDevicePresent());
  std::atomic<bool> stop{false};
  WatchSignals(&stop);

  Console console(o.run_dir);
  console.Line("logs and status in " + o.run_dir);
  std::vector<std::string> actor_args;
  // Every mode needs the tokenizer (actors load it at start); the quickstart job
  // also trains the model on the task set.
  {
    const std::string repo = FindRepoDir(o.repo_dir, *bin_dir);
    const std::string shared = o.shared_dir.empty() ? repo + "/../shared" : o.shared_dir;
    absl::StatusOr<QuickstartAssets> assets = MakeQuickstartAssets(repo, o.run_dir, shared, o.gpu);
    if (!assets.ok()) {
      console.Line(std::string(assets.status().message()));
      return 1;
    }
    console.Line(absl::StrCat("quickstart: tiny random model ", assets->model_dir, ", tasks ", assets->task_set,
                              ", scripted policy replaying ", assets->solutions_dir));
    if (o.job_spec_file.empty()) spec = QuickstartJobSpec(assets->model_dir, assets->task_set, o.gpu);
    actor_args = {"--set=policy.kind=scripted", "--set=policy.scripted_solutions_dir=" + assets->solutions_dir,
                  "--set=tokenizer_path=" + assets->model_dir + "/tokenizer.json",
                  "--set=rollout.skill_path=" + assets->skill_path};
  }
  Cluster cluster(o, *bin_dir, actor_args, &console);
  if (absl::Status s = cluster.Start(); !s.ok()) {
    console.Line("FAILED to start the cluster: " + std::string(s.message()));
    cluster.Stop();
    return 1;
  }
  const bool all_serving = cluster.Report();
  if (o.check) {
    console.Line(all_serving ? "all services SERVING" : "some services are not serving");
    cluster.Stop();
    return all_serving ? 0 : 1;
  }

  int code = 0;
  if (o.job == "quickstart") {
    const absl::Time t0 = absl::Now();
    absl::StatusOr<v1::Job> job = RunJob(cluster.LearnerAddress(), spec, t0 + absl::Seconds(o.job_timeout_s),
                                         absl::Seconds(o.stall_timeout_s), stop,
                                         [&](const std::string& line) { console.Line(line); });
    if (job.ok()) {
      std::istringstream report(FinalReport(*job, absl::Now() - t0));
      for (std::string line; std::getline(report, line);) console.Line(line);
      console.Line("restarts:" + cluster.Restarts());
      code = job->state() == v1::Job::SUCCEEDED ? 0 : 1;
    } else if (absl::IsUnimplemented(job.status())) {
      console.Line(std::string(job.status().message()) + ": the cluster stays up without a job");
      o.job = "none";
    } else {
      console.Line("job failed: " + std::string(job.status().message()));
      code = 1;
    }
  }
  if (o.job == "none") {
    console.Line("running; Ctrl-C stops the cluster");
    while (!stop && !console.gave_up()) absl::SleepFor(absl::Milliseconds(200));
    if (console.gave_up()) code = 1;
  }
  console.Line("stopping (SIGTERM: each service drains, then exits)");
  cluster.Stop();
  return code;
}

}  // namespace kernelrl::up
