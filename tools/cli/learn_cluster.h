// `kernelrl learn`'s flags and the processes of one learning run: the learner
// (job API + policy server), the sandbox worker and the two actor pools as
// supervised children (tools/cli/local_cluster.h), and the console that prints
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
#include "proto/cli_config.pb.h"
#include "tools/cli/command_line.h"
#include "tools/cli/local_cluster.h"
#include "tools/cli/up_supervisor.h"

namespace kernelrl::cli {

// The flags of `kernelrl learn`, each onto a field of kernelrl.v1.LearnConfig.
void AddLearnFlags(CommandLine& cl);
// Built-in defaults of the run (not of the experiment: that is configs/learn/family.textproto).
extern const char kLearnDefaults[];
// The experiment preset merged when neither --config nor --preset is given.
constexpr char kLearnDefaultPreset[] = "family";
// Required fields and allowed values; fills learner_device ("" = backend) and the job's trainer device
// and dtype (bfloat16 on a GPU, float32 on the CPU, unless the preset says).
absl::Status ValidateLearnConfig(v1::LearnConfig* o);

// The turns a held-out evaluation gives the policy: the ones it trains with (agentic PPO's).
int EvalMaxTurns(const v1::LearnConfig& o);
// N of learner_device "cuda:N" (the learner process is started on GPU N alone), else -1.
int LearnerGpu(const v1::LearnConfig& o);
// The device as the learner process names it: "cuda" for cuda:N (it sees GPU N alone, as its
// cuda:0), else learner_device.
std::string LearnerProcessDevice(const v1::LearnConfig& o);
// The GPU sandbox worker `worker` times on: sandbox_first_gpu + worker.
int SandboxWorkerGpu(const v1::LearnConfig& o, int worker);
// Whether the learner runs on the GPU that sandbox worker `worker` times on (SandboxWorkerGpu):
// learner_device "cuda" (GPU 0) or "cuda:N". Then the two share a GPU lease (common/gpu_lease.h).
bool LearnerSharesSandboxGpu(const v1::LearnConfig& o, int worker);
// The flag naming the GPU lease the learner and the sandbox worker on its GPU share.
std::string GpuLeaseFlag(const v1::LearnConfig& o);
// learner_main's flags for the job: its state, the policy server on the base
// checkpoint, the attention backend, the GPU lease where it shares a worker's GPU.
std::vector<std::string> LearnerArgs(const v1::LearnConfig& o);
// The actor pool whose rollouts the job's stage takes: "engineer" (the scripted engineer) for an
// agent warm-up that does not take the model's rollouts, "actor" (the model) otherwise. A warm-up
// whose take_policies name "model" is the paper's: the model's own rollouts, of which RFT keeps
// R > 0 (configs/learn/self_warmup.textproto).
std::string PoolForStage(const v1::LearnConfig& o, const std::string& stage);

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

// The processes of one learning run, on the shared launcher (local_cluster.h).
class Cluster {
 public:
  Cluster(const v1::LearnConfig& o, const std::vector<std::string>& sets, Console* console)
      : o_(o), sets_(sets), console_(console),
        local_(o.paths().bin_dir(), o.paths().run_dir(), [console](const up::SupervisorEvent& e) {
          if (e.kind == up::SupervisorEvent::kExited || e.kind == up::SupervisorEvent::kGaveUp) {
            console->Line(absl::StrCat(e.name, " exited: ", e.detail, " (log: ", e.name, ".log)"));
          }
        }) {}

  // Starts a server ("learner", "sandbox", "sandbox-1": the config's fields named before any '-' go
  // to it) and returns its gRPC address once it serves.
  absl::StatusOr<std::string> StartServer(const std::string& name, const std::string& binary,
                                          std::vector<std::string> args, absl::Time deadline,
                                          const std::vector<std::string>& env = {});

  // Runs `n` actors of the pool ("actor" sampling the model or "random") and stops the other pool.
  // The old pool drains in the background: an actor told to stop finishes its
  // in-flight rollouts and pushes them (a rollout killed mid-way holds its lease
  // until the lease times out, and a stage waiting for that trajectory stalls).
  void UsePool(const std::string& pool, int64_t version);

  // Stops the running pool; its actors finish and push their rollouts in flight, so a paused job
  // holds no lease that its resumed learner would wait out. Those still running after `grace` are
  // killed (for a job that is over: its rollouts in flight are worth nothing).
  void StopActors(absl::Duration grace = absl::Seconds(60));

  std::string SkillPath() const { return o_.paths().run_dir() + "/FAMILY_SKILL.md"; }
  ~Cluster() { JoinDraining(); }
  void StopAll();

  std::string learner_;
  std::vector<std::string> sandboxes_;  // The sandbox workers' addresses.
  // The actors' and evaluations' sandbox target: every worker, balanced by round_robin.
  std::string SandboxTarget() const;

 private:
  std::vector<std::string> ActorArgs(const std::string& name, const std::string& kind, int64_t version) const;
  void JoinDraining();

  const v1::LearnConfig& o_;
  const std::vector<std::string>& sets_;
  Console* console_;
  LocalCluster local_;
  std::string pool_;
  std::vector<std::string> running_;
  std::vector<std::thread> draining_;  // Stopping the previous pools.
  int generation_ = 0;
};

}  // namespace kernelrl::cli

#endif  // KERNELRL_TOOLS_CLI_LEARN_CLUSTER_H_
