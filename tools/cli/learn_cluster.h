// `kernelrl learn`'s flags and the processes of one learning run: the learner
// (job API + policy server), the sandbox worker and the two actor pools as
// supervised children (tools/cli/up_supervisor.h), and the console that prints
// and logs the run's progress. learn_cmd.cc drives them.
#ifndef KERNELRL_TOOLS_CLI_LEARN_CLUSTER_H_
#define KERNELRL_TOOLS_CLI_LEARN_CLUSTER_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "tools/cli/up_supervisor.h"

namespace kernelrl::cli {

extern const char kLearnUsage[];

struct LearnOptions {
  std::string base_checkpoint, family_dir, backend = "cpu", run_dir, bin_dir, ablation = "none";
  // Where the learner trains and the policy server samples ("" = the backend). On one GPU, "cpu"
  // keeps the sandbox's timings free of the learner's kernels (a small model trains fine on CPU).
  std::string learner_device;
  std::string python = "python3", plot_script;
  int actors = 1, random_actors = 1, concurrent_rollouts = 2, eval_every = 5, eval_tasks = 0, eval_rollouts = 1;
  int rollouts_per_task = 4;  // A task's group in a batch, for the per-task baseline.
  double job_timeout_s = 3600, stall_timeout_s = 600;
  // Held-out evaluations: 0 = greedy (kernelrl eval's default); > 0 samples like the training
  // actors, so --eval_rollouts repeats measure the policy's expected reward with a spread.
  double eval_temperature = 0;
  int eval_max_turns = 3;  // The job's agentic_ppo.max_turns once the job's hyperparameters are read.
  std::vector<std::string> job_sets;
  std::map<std::string, std::vector<std::string>> sets;  // service -> --set=...
  // A run longer than one sitting (a GPU machine lent for 10 minutes at a time): the services stop
  // and the job stays RUNNING in --run_dir at --job_timeout_s (--pause_at_timeout) or once agentic PPO
  // has K steps; --resume restarts them on that run dir, the learner resumes the job from its last
  // checkpoint, and this follows it on (the curves and evaluations continue).
  bool pause_at_timeout = false, resume = false;
  int pause_after_agentic_steps = 0;
};

absl::StatusOr<LearnOptions> ParseLearnFlags(int argc, char** argv);

// The rollout settings that make the prompt and the reply: the training actors and the held-out
// evaluations must see the same ones. prefix: "--set=rollout." or "--set=actor.rollout.".
std::vector<std::string> PromptFlags(const std::string& prefix, const std::string& skill_path);

std::string SelfExe();
// Service binaries: --bin_dir, this binary's runfiles, or the bazel-bin tree it sits in.
absl::StatusOr<std::string> FindBinDir(const std::string& flag);
// Whether the gRPC server at `address` answers its health check with SERVING.
bool Serving(const std::string& address);

class Console {
 public:
  // start: when the run began (a resumed run keeps its first start, so seconds run on across sittings).
  Console(const std::string& path, absl::Time start) : log_(path, std::ios::app), start_(start) {}
  void Line(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string line = absl::StrFormat("[learn %6.1fs] %s\n", Seconds(), text);
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
    log_ << line << std::flush;
  }
  double Seconds() const { return absl::ToDoubleSeconds(absl::Now() - start_); }
  int64_t StartUnixMs() const { return absl::ToUnixMillis(start_); }

 private:
  std::mutex mu_;
  std::ofstream log_;
  const absl::Time start_;
};

// The processes of one learning run.
class Cluster {
 public:
  Cluster(const LearnOptions& o, std::string bin, Console* console)
      : o_(o), bin_(std::move(bin)), console_(console), sup_(up::RestartPolicy{}, [console](const up::SupervisorEvent& e) {
          if (e.kind == up::SupervisorEvent::kExited || e.kind == up::SupervisorEvent::kGaveUp) {
            console->Line(absl::StrCat(e.name, " exited: ", e.detail, " (log: ", e.name, ".log)"));
          }
        }) {}

  std::vector<std::string> Common(const std::string& name) const {
    return {"--set=server.grpc_port=0", "--set=server.metrics_port=0",
            absl::StrCat("--set=server.port_file=", o_.run_dir, "/", name, ".ports"), "--set=server.drain_seconds=0.5",
            "--set=server.grace_seconds=10"};
  }

  // Starts a server and returns its gRPC address once it serves.
  absl::StatusOr<std::string> StartServer(const std::string& name, const std::string& binary,
                                          std::vector<std::string> args, absl::Time deadline) {
    std::vector<std::string> argv = {bin_ + "/" + binary};
    for (const std::string& a : Common(name)) argv.push_back(a);
    argv.insert(argv.end(), args.begin(), args.end());
    auto sets = o_.sets.find(name);
    if (sets != o_.sets.end()) argv.insert(argv.end(), sets->second.begin(), sets->second.end());
    const std::string port_file = absl::StrCat(o_.run_dir, "/", name, ".ports");
    unlink(port_file.c_str());
    if (auto s = sup_.Start({name, argv, absl::StrCat(o_.run_dir, "/", name, ".log")}); !s.ok()) return s;
    while (absl::Now() < deadline && !sup_.State(name).gave_up) {
      auto ports = up::ReadPorts(port_file);
      if (ports.count("grpc_port")) {
        const std::string address = absl::StrCat("127.0.0.1:", ports["grpc_port"]);
        // Restarts come back on the same port.
        for (std::string& a : argv) {
          if (a == "--set=server.grpc_port=0") a = absl::StrCat("--set=server.grpc_port=", ports["grpc_port"]);
        }
        sup_.SetArgv(name, argv);
        while (absl::Now() < deadline && !Serving(address)) absl::SleepFor(absl::Milliseconds(200));
        return address;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    return absl::UnavailableError(absl::StrCat(name, " did not start; see ", o_.run_dir, "/", name, ".log"));
  }

  // The actor arguments both pools share.
  std::vector<std::string> ActorArgs(const std::string& name, const std::string& kind, int64_t version) const {
    const std::string suffix = o_.backend == "cpu" ? "_cpu" : "";
    std::vector<std::string> argv = {bin_ + "/actor/actor_main"};
    for (const std::string& a : Common(name)) argv.push_back(a);
    for (const std::string& a : std::vector<std::string>{
             "--set=learner_address=" + learner_, "--set=policy_address=" + learner_,
             "--set=sandbox_address=" + sandbox_, "--set=sandbox.target=ipv4:" + sandbox_,
             "--set=policy.kind=" + kind + suffix, "--set=policy.address=" + learner_,
             absl::StrCat("--set=policy.scripted_policy_version=", version), "--set=actor_id=" + name,
             absl::StrCat("--set=concurrent_rollouts=", o_.concurrent_rollouts),
             "--set=tokenizer_path=" + o_.base_checkpoint + "/tokenizer.json", "--set=rollout.max_turns=3",
             "--set=rollout.temperature=1.0", "--set=rollout.final_evaluation=true",
             absl::StrCat("--set=rollout.workspace_root=", o_.run_dir, "/", name, "-ws")}) {
      argv.push_back(a);
    }
    for (const std::string& a : PromptFlags("--set=rollout.", SkillPath())) argv.push_back(a);
    auto sets = o_.sets.find("actor");
    if (sets != o_.sets.end()) argv.insert(argv.end(), sets->second.begin(), sets->second.end());
    return argv;
  }

  // Runs `n` actors of the pool ("actor" sampling the model or "random") and stops the other pool.
  // The old pool drains in the background: an actor told to stop finishes its
  // in-flight rollouts and pushes them (a rollout killed mid-way holds its lease
  // until the lease times out, and a stage waiting for that trajectory stalls).
  void UsePool(const std::string& pool, int64_t version) {
    if (pool == pool_) return;
    std::vector<std::string> stop = running_;
    running_.clear();
    if (!stop.empty()) draining_.emplace_back([this, stop] { sup_.Stop(stop, absl::Seconds(180)); });
    const int n = pool == "random" ? o_.random_actors : o_.actors;
    for (int i = 0; i < n; ++i) {
      const std::string name = absl::StrCat(pool, "-", i, "-g", ++generation_);
      const auto argv = ActorArgs(name, pool == "random" ? "choice_random" : "choice", version);
      if (auto s = sup_.Start({name, argv, absl::StrCat(o_.run_dir, "/", name, ".log")}); !s.ok()) {
        console_->Line("cannot start " + name + ": " + std::string(s.message()));
      }
      running_.push_back(name);
    }
    pool_ = pool;
    console_->Line(absl::StrCat(n, " ", pool == "random" ? "random-choice" : "model", " actor(s) running (policy v",
                                version, ")"));
  }

  // Stops the running pool; its actors finish and push their rollouts in flight, so a paused job
  // holds no lease that its resumed learner would wait out.
  void StopActors() {
    if (!running_.empty()) sup_.Stop(running_, absl::Seconds(60));
    running_.clear();
    pool_.clear();
  }

  std::string SkillPath() const { return o_.run_dir + "/FAMILY_SKILL.md"; }
  ~Cluster() { JoinDraining(); }
  void StopAll() {
    if (!running_.empty()) sup_.Stop(running_, absl::Seconds(20));
    sup_.StopAll(absl::Seconds(30));
    JoinDraining();
  }

  std::string learner_, sandbox_;

 private:
  const LearnOptions& o_;
  const std::string bin_;
  Console* console_;
  up::Supervisor sup_;
  std::string pool_;
  std::vector<std::string> running_;
  void JoinDraining() {
    for (std::thread& t : draining_) t.join();
    draining_.clear();
  }
  std::vector<std::thread> draining_;  // Stopping the previous pools.
  int generation_ = 0;
};

}  // namespace kernelrl::cli

#endif  // KERNELRL_TOOLS_CLI_LEARN_CLUSTER_H_
