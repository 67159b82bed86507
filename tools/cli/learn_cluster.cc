#include "tools/cli/learn_cluster.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config.h"
#include "common/file.h"

namespace kernelrl::cli {

const char kLearnDefaults[] = R"pb(
  backend: "cpu"
  actors: 1
  random_actors: 1
  concurrent_rollouts: 2
  rollouts_per_task: 4
  eval_every: 5
  eval_rollouts: 1
  job_timeout_s: 3600
  stall_timeout_s: 600
  python: "python3"
)pb";

void AddLearnFlags(CommandLine& cl) {
  cl.Flag("--base_checkpoint", "base_checkpoint", "HF-format checkpoint the job starts from");
  cl.Flag("--critic_checkpoint", "critic_checkpoint", "The critic the job starts from (an earlier job's, with its head)");
  cl.Flag("--family_dir", "family_dir", "family_gen's output (train.jsonl, heldout/)");
  cl.Flag("--backend", "backend", "The sandbox's backend: cpu or cuda");
  cl.Flag("--learner_device", "learner_device", "Where the learner trains: cpu, cuda, or cuda:N for GPU N alone (default: the backend)");
  cl.Flag("--policy_device", "policy_device", "Where the policy server samples: cpu, or the learner's device (default)");
  cl.Switch("--learner_sdpa_cudnn", "learner_sdpa_cudnn", "The learner's attention may use cuDNN (LearnerConfig.sdpa_cudnn)");
  cl.Flag("--run_dir", "paths.run_dir", "Logs, learner state, curves");
  cl.Flag("--bin_dir", "paths.bin_dir", "Service binaries (bazel-bin)");
  cl.Flag("--actors", "actors", "Actors sampling the model");
  cl.Flag("--sandbox_workers", "sandbox_workers", "Sandbox workers; worker i times on GPU first + i (the learner's GPU: under its lease)");
  cl.Flag("--sandbox_first_gpu", "sandbox_first_gpu", "The first sandbox worker's GPU (jobs side by side: one each)");
  cl.Flag("--random_actors", "random_actors", "Scripted-engineer actors (the warm-up's data: policy.kind engineer)");
  cl.Flag("--concurrent_rollouts", "concurrent_rollouts", "Rollouts at once per actor");
  cl.Flag("--rollouts_per_task", "rollouts_per_task", "A task's group in a batch");
  cl.Flag("--eval_every", "eval_every", "Held-out evaluation every K agentic PPO steps");
  cl.Flag("--eval_tasks", "eval_tasks", "Held-out tasks evaluated (0 = all)");
  cl.Flag("--eval_rollouts", "eval_rollouts", "Rollouts per held-out task");
  cl.Flag("--eval_temperature", "eval_temperature", "0 = greedy held-out evaluations");
  cl.Switch("--skip_start_eval", "skip_start_eval", "No evaluation of the base before the job (an earlier job on the same base has it)");
  cl.Switch("--skip_ppo_start_eval", "skip_ppo_start_eval",
            "No evaluation at agentic PPO's start (a job going on from an earlier job's final policy)");
  cl.Switch("--skip_final_eval", "skip_final_eval",
            "No evaluation after the job, nor time held for one (a later job goes on from its policy and evaluates it)");
  cl.Switch("--eval_only", "eval_only",
            "No job: the base checkpoint scored once on the held-out tasks (kernelrl seeds --rescored)");
  cl.Flag("--expected_eval_s", "expected_eval_s",
          "Seconds a held-out evaluation is expected to take until one is timed (the cut holds 1.25x it)");
  cl.Flag("--job_timeout_s", "job_timeout_s",
          "Seconds for the job, its final held-out evaluation included: the job is cut 1.25x the longest "
          "evaluation so far before it");
  cl.Flag("--stall_timeout_s", "stall_timeout_s", "Seconds without a change to the job before cancelling");
  cl.Switch("--pause_at_timeout", "pause_at_timeout",
            "Where job_timeout_s cuts the job, pause it instead of cancelling it (its pause evaluation ends by job_timeout_s)");
  cl.Flag("--pause_after_agentic_steps", "pause_after_agentic_steps", "Pause once agentic PPO has K steps");
  cl.Switch("--resume", "resume", "Go on with the paused run in --run_dir");
  cl.Flag("--python", "python", "Runs the plot script");
  cl.Flag("--plot_script", "plot_script", "Curves' plots (default tools/cli/learn_plots.py)");
  cl.Flag(
      "--ablation",
      [](const std::string& name) -> absl::StatusOr<std::string> {
        if (name == "none") return std::string("ablation: \"none\"");
        absl::StatusOr<std::string> path = PresetPath("learn", "ablation_" + name);
        if (!path.ok()) return absl::NotFoundError("no such ablation (configs/learn/ablation_*.textproto)");
        return ReadFileToString(*path);
      },
      "none, or a preset configs/learn/ablation_NAME.textproto (no_rft, no_value, no_rft_no_value)");
  cl.Flag(
      "--job_set", [&cl](const std::string& a) -> absl::StatusOr<std::string> {
        const size_t eq = a.find('=');
        if (eq == std::string::npos) return absl::InvalidArgumentError("expected FIELD=VALUE");
        return cl.Assign("job." + a.substr(0, eq), a.substr(eq + 1));
      },
      "FIELD=VALUE of the job's LearnerJobConfig (same as --set=job.FIELD=VALUE)");
}

absl::Status ValidateLearnConfig(v1::LearnConfig* o) {
  if (o->base_checkpoint().empty() || o->family_dir().empty()) {
    return absl::InvalidArgumentError("base_checkpoint and family_dir are required (--base_checkpoint, --family_dir)");
  }
  if (o->backend() != "cpu" && o->backend() != "cuda") return absl::InvalidArgumentError("backend: cpu or cuda");
  if (o->learner_device().empty()) o->set_learner_device(o->backend());
  if (o->learner_device() != "cpu" && o->learner_device() != "cuda" && LearnerGpu(*o) < 0) {
    return absl::InvalidArgumentError(absl::StrCat("learner_device: cpu, cuda or cuda:N, not \"", o->learner_device(), "\""));
  }
  if (!o->policy_device().empty() && o->policy_device() != "cpu") {
    return absl::InvalidArgumentError(absl::StrCat("policy_device: cpu, or empty for the learner's device, not \"",
                                                   o->policy_device(), "\""));
  }
  if (o->rollouts_per_task() < 1) return absl::InvalidArgumentError("rollouts_per_task: at least 1");
  if (o->eval_only() && o->resume()) {
    return absl::InvalidArgumentError("eval_only with resume: an evaluation alone has no job to resume");
  }
  if (o->sandbox_workers() < 0) return absl::InvalidArgumentError("sandbox_workers: at least 1 (0 = 1)");
  if (o->sandbox_workers() == 0) o->set_sandbox_workers(1);
  if (o->sandbox_first_gpu() < 0) return absl::InvalidArgumentError("sandbox_first_gpu: a GPU index, at least 0");
  if (!(o->expected_eval_s() >= 0)) return absl::InvalidArgumentError("expected_eval_s: seconds, at least 0");
  if (o->resume() && o->paths().run_dir().empty()) {
    return absl::InvalidArgumentError("resume needs the paused run's run_dir (--run_dir)");
  }
  if (!o->has_job() || o->skill_text().empty()) {
    return absl::InvalidArgumentError("no experiment: the preset sets job, rollout and skill_text (--preset=family)");
  }
  // The log-probs PPO trains on are of the temperature the training actors sampled at: one figure,
  // rollout.temperature, unless the job names the same one (a different one would reject every
  // model trajectory at ingest).
  const double sampled = o->rollout().temperature();
  v1::PpoConfig* ppo = o->mutable_job()->mutable_ppo();
  if (sampled > 0 && ppo->temperature() == 0) ppo->set_temperature(sampled);
  if (sampled > 0 && std::abs(ppo->temperature() - sampled) > 1e-6) {  // float and double fields
    return absl::InvalidArgumentError(absl::StrCat("job.ppo.temperature ", ppo->temperature(),
                                                   " is not the actors' rollout.temperature ", sampled,
                                                   ": set one (the other follows it)"));
  }
  v1::TrainerDeviceConfig* device = o->mutable_job()->mutable_device();
  if (device->device().empty()) device->set_device(LearnerProcessDevice(*o));
  // bf16 on a GPU (the engine serves in the trainer's dtype), fp32 on the CPU.
  if (device->dtype().empty()) device->set_dtype(device->device() == "cpu" ? "float32" : "bfloat16");
  if (device->dtype() != "float32" && device->dtype() != "bfloat16") {
    return absl::InvalidArgumentError(absl::StrCat("job.device.dtype: float32 or bfloat16, not \"", device->dtype(), "\""));
  }
  return absl::OkStatus();
}

int LearnerGpu(const v1::LearnConfig& o) {
  int n = -1;
  const std::string& d = o.learner_device();
  if (d.rfind("cuda:", 0) != 0 || !absl::SimpleAtoi(d.substr(5), &n) || n < 0) return -1;
  return n;
}

std::string LearnerProcessDevice(const v1::LearnConfig& o) {
  return LearnerGpu(o) >= 0 ? "cuda" : o.learner_device();
}

int SandboxWorkerGpu(const v1::LearnConfig& o, int worker) { return o.sandbox_first_gpu() + worker; }

bool LearnerSharesSandboxGpu(const v1::LearnConfig& o, int worker) {
  const int gpu = SandboxWorkerGpu(o, worker);
  return o.backend() == "cuda" && (o.learner_device() == "cuda" ? gpu == 0 : LearnerGpu(o) == gpu);
}

std::string GpuLeaseFlag(const v1::LearnConfig& o) {
  return "--set=gpu_lease_path=" + o.paths().run_dir() + "/gpu.lease";
}

std::vector<std::string> LearnerArgs(const v1::LearnConfig& o) {
  std::vector<std::string> args = {
      "--set=state_dir=" + o.paths().run_dir() + "/learner-state", "--set=policy.enabled=true",
      "--set=policy.model_path=" + o.base_checkpoint(),
      "--set=policy.device=" + (o.policy_device().empty() ? LearnerProcessDevice(o) : o.policy_device()),
      // The engine serves in the trainer's dtype on its device; on the CPU in float32.
      "--set=policy.dtype=" + (o.policy_device() == "cpu" ? std::string("float32") : o.job().device().dtype()),
      "--set=policy.max_seq_len=16384",
      "--set=policy.max_batch=16"};
  if (o.learner_sdpa_cudnn()) args.push_back("--set=sdpa_cudnn=true");
  for (int w = 0; w < o.sandbox_workers(); ++w) {
    if (LearnerSharesSandboxGpu(o, w)) {
      args.push_back(GpuLeaseFlag(o));
      break;
    }
  }
  return args;
}

std::string PoolForStage(const v1::LearnConfig& o, const std::string& stage) {
  if (stage != "agent_warmup") return "actor";
  const auto& takes = o.job().recipe().agent_warmup().take_policies();
  return std::find(takes.begin(), takes.end(), "model") != takes.end() ? "actor" : "engineer";
}

int EvalMaxTurns(const v1::LearnConfig& o) {
  const int turns = o.job().recipe().agentic_ppo().max_turns();
  return turns > 0 ? turns : 3;
}

absl::StatusOr<std::string> Cluster::StartServer(const std::string& name, const std::string& binary,
                                                 std::vector<std::string> args, absl::Time deadline,
                                                 const std::vector<std::string>& env) {
  for (const std::string& a : ServiceArgs(o_, sets_, name.substr(0, name.find('-')))) args.push_back(a);
  absl::StatusOr<ServerPorts> ports = local_.StartServer(name, binary, args, deadline, env);
  if (!ports.ok()) return ports.status();
  LocalCluster::WaitServing(ports->Address(), deadline);
  return ports->Address();
}

std::vector<std::string> Cluster::ActorArgs(const std::string& name, const std::string& kind, int64_t version) const {
  // The engineer writes CPU kernels on the CPU backend; the model writes whatever it writes.
  const std::string suffix = kind == "engineer" && o_.backend() == "cpu" ? "_cpu" : "";
  std::vector<std::string> args = {"--config_text=rollout { " + TextProto(o_.rollout()) + " }",
                                   "--set=learner_address=" + learner_,
                                   "--set=sandbox.target=" + SandboxTarget(),
                                   "--set=sandbox.health_check=true",  // a NOT_SERVING worker gets no work
                                   "--set=policy.kind=" + kind + suffix,
                                   "--set=policy.address=" + learner_,
                                   absl::StrCat("--set=policy.scripted_policy_version=", version),
                                   "--set=actor_id=" + name,
                                   absl::StrCat("--set=concurrent_rollouts=", o_.concurrent_rollouts()),
                                   "--set=tokenizer_path=" + o_.base_checkpoint() + "/tokenizer.json",
                                   "--set=rollout.skill_path=" + SkillPath(),
                                   absl::StrCat("--set=rollout.workspace_root=", o_.paths().run_dir(), "/", name, "-ws")};
  for (const std::string& a : ServiceArgs(o_, sets_, "actor")) args.push_back(a);
  return args;
}

std::string Cluster::SandboxTarget() const { return "ipv4:" + absl::StrJoin(sandboxes_, ","); }

void Cluster::UsePool(const std::string& pool, int64_t version) {
  if (pool == pool_) return;
  std::vector<std::string> stop = running_;
  running_.clear();
  if (!stop.empty()) draining_.emplace_back([this, stop] { local_.Stop(stop, absl::Seconds(180)); });
  const int n = pool == "engineer" ? o_.random_actors() : o_.actors();
  for (int i = 0; i < n; ++i) {
    const std::string name = absl::StrCat(pool, "-", i, "-g", ++generation_);
    // An actor is nobody's server: its ports stay the kernel's pick across restarts.
    if (auto s = local_.StartProcess(name, "actor/actor_main", ActorArgs(name, pool == "engineer" ? "engineer" : "grpc", version));
        !s.ok()) {
      console_->Line("cannot start " + name + ": " + std::string(s.message()));
    }
    running_.push_back(name);
  }
  pool_ = pool;
  console_->Line(absl::StrCat(n, " ", pool == "engineer" ? "scripted-engineer" : "model", " actor(s) running (policy v",
                              version, ")"));
}

void Cluster::StopActors(absl::Duration grace) {
  if (!running_.empty()) local_.Stop(running_, grace);
  running_.clear();
  pool_.clear();
}

void Cluster::StopAll() {
  if (!running_.empty()) local_.Stop(running_, absl::Seconds(20));
  local_.StopAll(absl::Seconds(30));
  JoinDraining();
}

void Cluster::JoinDraining() {
  for (std::thread& t : draining_) t.join();
  draining_.clear();
}

}  // namespace kernelrl::cli
