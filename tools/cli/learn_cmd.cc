#include "tools/cli/learn_cmd.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/config.h"
#include "common/file.h"
#include "common/json.h"
#include "common/text.h"
#include "grpcpp/grpcpp.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/learner.grpc.pb.h"
#include "proto/learner_config.pb.h"
#include "tools/cli/learn_curves.h"
#include "tools/cli/up_supervisor.h"

namespace kernelrl::cli {
namespace {

namespace fs = std::filesystem;

constexpr char kUsage[] =
    "usage: kernelrl learn --base_checkpoint=DIR --family_dir=DIR [--backend=cpu|cuda] [--learner_device=cpu|cuda]\n"
    "         [--run_dir=DIR]\n"
    "         [--bin_dir=DIR] [--actors=N] [--random_actors=N] [--concurrent_rollouts=N]\n"
    "         [--ablation=none|no_rft|no_value|no_rft_no_value] [--eval_every=K] [--eval_tasks=N]\n"
    "         [--eval_rollouts=R] [--eval_temperature=T] [--rollouts_per_task=G] [--job_set=FIELD=VALUE ...] [--set=SERVICE.FIELD=VALUE ...]\n"
    "         [--pause_at_timeout] [--pause_after_agentic_steps=K] [--resume --run_dir=DIR]\n"
    "         [--job_timeout_s=S] [--stall_timeout_s=S] [--python=PY] [--plot_script=FILE]\n"
    "The recipe on the task family as one job (tools/cli/learn_cmd.h, docs/LEARNING.md).\n";

// The recipe for a model learning the family's vocabulary from scratch: few
// turns, 4-token replies (only a reply's first 4 characters act), learning
// rates far above fine-tuning's 3e-6. Measured on the CPU backend: at actor lr
// 1e-4 and RFT 3e-4 x 2 epochs the policy stayed uniform over the 1,190-token
// vocabulary (entropy 7.081 -> 7.080 in 30 updates); Adam moves each weight by
// about lr per update, so a from-scratch head needs ~1e-3 to move in tens of steps.
// RFT must concentrate the policy on the vocabulary's characters before PPO: each
// token's logit learns alone, so PPO over a 1,190-way spread barely moves. CPU:
// RFT 16 updates at 3e-3 left entropy at ~5; 40 updates at 5e-3 (20 epochs of 32
// trajectories, batch 16) reached 1.5. On the H100 (31 PPO updates of 16) the
// critic explained ~0 of the return, so advantages R - V were mostly positive and
// pushed every sampled token up: advantages are normalised over the batch. Stale
// trajectories (lag 3 at max_policy_lag 2) were 12% of the agentic rollouts: lag 4,
// which the truncated importance weights correct. Four H100 runs later the policy still
// gave one reply to every task: the critic told tasks apart no better than the batch mean,
// so the tasks that pay more (GEMMs: 3 for the library path) set every task's reply. Each
// task now comes in groups of --rollouts_per_task and its rollouts are centred on the mean
// of its others (ppo.task_baseline).
constexpr char kJobDefaults[] = R"pb(
  recipe {
    single_turn_ppo { steps: 4 max_turns: 1 }
    agent_warmup { steps: 32 max_turns: 3 }
    rft { epochs: 20 lr: 5e-3 max_repeated_calls: 3 }
    value_pretrain { steps: 16 }
    agentic_ppo { steps: 20 max_turns: 3 }
  }
  ppo { tis_threshold: 2.0 normalize_advantages: true task_baseline: true }
  actor_optimizer { lr: 1e-3 }
  critic_optimizer { lr: 1e-3 }
  batch { trajectories_per_step: 8 max_tokens_per_row: 32768 activation_checkpointing: false }
  ingest { max_policy_lag: 4 lease_timeout_seconds: 120 }
)pb";

// Tokens per reply: the action is the reply's first 4 characters.
constexpr int kReplyTokens = 4;

// Short, and SKILL.md is left out of the prompt (rollout.omit_skill_from_prompt): the model
// learns from scratch and cannot read either, and the shorter the prompt, the larger the share
// of the task line it has to condition its choice on.
constexpr char kSystemPrompt[] =
    "Reply with four digits, the design of the task's kernel (SKILL.md lists the slots), or '.' when done.";

// The rollout settings that make the prompt and the reply: the training actors and the held-out
// evaluations must see the same ones. prefix: "--set=rollout." or "--set=actor.rollout.".
std::vector<std::string> PromptFlags(const std::string& prefix, const std::string& skill_path) {
  return {prefix + "skill_path=" + skill_path, prefix + "system_prompt=" + kSystemPrompt,
          prefix + "omit_skill_from_prompt=true", absl::StrCat(prefix, "max_new_tokens_per_turn=", kReplyTokens),
          prefix + "context_tokens=16384"};
}

constexpr char kSkill[] = R"(# Skill: the family's design vocabulary
Your reply's first four characters pick one option per slot (character code mod the slot's option count;
digits 0-5 read as themselves). The template for the task's family is rendered with your choice, written to
kernels/ and model_new.py, and profiled; the observation is the verdict. Reply '.' to finish.
- elementwise:   vec 1|2|4, block 64|256|1024, work 1|4|4c (4c: adjacent, uncoalesced), precision fp32|fp16
- rowreduce:     strategy thread|warp|block per row, block 64|256|1024, vec 1|4, precision fp32|fp16
- gemm_epilogue: gemm cublas|tiled16|tiled32x2, epilogue separate|fused, block 128|256|512, precision fp32|fp16
fp16 overflows on inputs of magnitude 1e5 unless the op saturates first.
)";

struct Options {
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

absl::StatusOr<Options> ParseFlags(int argc, char** argv) {
  Options o;
  std::string bad_number;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    std::string v;
    auto value = [&](absl::string_view flag, std::string* out) {
      absl::string_view rest = a;
      if (!absl::ConsumePrefix(&rest, flag)) return false;
      *out = std::string(rest);
      return true;
    };
    auto number = [&](absl::string_view flag, auto* out) {
      std::string text;
      if (!value(flag, &text)) return false;
      double d = 0;
      if (!absl::SimpleAtod(text, &d)) bad_number = std::string(a);
      *out = static_cast<std::remove_pointer_t<decltype(out)>>(d);
      return true;
    };
    if (a == "--help" || a == "-h") return absl::CancelledError("help");
    if (a == "--pause_at_timeout" || a == "--resume") {
      (a == "--resume" ? o.resume : o.pause_at_timeout) = true;
      continue;
    }
    if (value("--base_checkpoint=", &o.base_checkpoint) || value("--family_dir=", &o.family_dir) ||
        value("--run_dir=", &o.run_dir) || value("--bin_dir=", &o.bin_dir) || value("--python=", &o.python) ||
        value("--plot_script=", &o.plot_script) || number("--actors=", &o.actors) ||
        number("--random_actors=", &o.random_actors) || number("--concurrent_rollouts=", &o.concurrent_rollouts) ||
        number("--eval_every=", &o.eval_every) || number("--eval_tasks=", &o.eval_tasks) ||
        number("--eval_rollouts=", &o.eval_rollouts) || number("--eval_temperature=", &o.eval_temperature) ||
        number("--rollouts_per_task=", &o.rollouts_per_task) ||
        number("--pause_after_agentic_steps=", &o.pause_after_agentic_steps) ||
        number("--job_timeout_s=", &o.job_timeout_s) ||
        number("--stall_timeout_s=", &o.stall_timeout_s)) {
      continue;
    }
    if (value("--learner_device=", &o.learner_device)) {
      if (o.learner_device != "cpu" && o.learner_device != "cuda") {
        return absl::InvalidArgumentError("--learner_device: cpu or cuda");
      }
    } else if (value("--backend=", &o.backend)) {
      if (o.backend != "cpu" && o.backend != "cuda") return absl::InvalidArgumentError("--backend: cpu or cuda");
    } else if (value("--ablation=", &o.ablation)) {
      if (o.ablation != "none" && o.ablation != "no_rft" && o.ablation != "no_value" && o.ablation != "no_rft_no_value") {
        return absl::InvalidArgumentError("--ablation: none, no_rft, no_value or no_rft_no_value");
      }
    } else if (value("--job_set=", &v)) {
      const size_t eq = v.find('=');
      if (eq == std::string::npos) return absl::InvalidArgumentError("--job_set=FIELD=VALUE: " + v);
      o.job_sets.push_back(v);
    } else if (value("--set=", &v)) {
      const size_t dot = v.find('.');
      const std::string service = v.substr(0, dot);
      if (dot == std::string::npos || (service != "learner" && service != "sandbox" && service != "actor")) {
        return absl::InvalidArgumentError("--set=SERVICE.FIELD=VALUE with SERVICE learner|sandbox|actor: " + v);
      }
      o.sets[service].push_back("--set=" + v.substr(dot + 1));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", a));
    }
  }
  if (!bad_number.empty()) return absl::InvalidArgumentError("not a number: " + bad_number);
  if (o.rollouts_per_task < 1) return absl::InvalidArgumentError("--rollouts_per_task: at least 1");
  if (o.resume && o.run_dir.empty()) return absl::InvalidArgumentError("--resume needs the paused run's --run_dir");
  if (o.base_checkpoint.empty() || o.family_dir.empty()) {
    return absl::InvalidArgumentError("--base_checkpoint and --family_dir are required");
  }
  return o;
}

std::string SelfExe() {
  std::error_code ec;
  return fs::read_symlink("/proc/self/exe", ec).string();
}

// Service binaries: --bin_dir, this binary's runfiles, or the bazel-bin tree it sits in.
absl::StatusOr<std::string> FindBinDir(const std::string& flag) {
  std::vector<std::string> candidates;
  if (!flag.empty()) candidates.push_back(flag);
  const fs::path self = SelfExe();
  candidates.push_back(self.string() + ".runfiles/kernelrl");
  candidates.push_back(self.parent_path().parent_path().parent_path().string());
  if (const char* rf = getenv("RUNFILES_DIR")) candidates.push_back(std::string(rf) + "/kernelrl");
  for (const std::string& c : candidates) {
    if (access((c + "/learner/learner_main").c_str(), X_OK) == 0 && access((c + "/actor/actor_main").c_str(), X_OK) == 0) {
      return c;
    }
  }
  return absl::NotFoundError("service binaries not found (build them, or pass --bin_dir=bazel-bin)");
}

// "recipe.rft.skip=true" -> "recipe { rft { skip: true } }" (protobuf text).
std::string TextField(const std::string& field_eq_value) {
  const size_t eq = field_eq_value.find('=');
  std::vector<std::string> path = absl::StrSplit(field_eq_value.substr(0, eq), '.');
  std::string value = field_eq_value.substr(eq + 1);
  std::string out;
  for (size_t i = 0; i + 1 < path.size(); ++i) absl::StrAppend(&out, path[i], " { ");
  absl::StrAppend(&out, path.back(), ": ", value);
  for (size_t i = 0; i + 1 < path.size(); ++i) absl::StrAppend(&out, " }");
  return out;
}

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

bool Serving(const std::string& address) {
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::health::v1::HealthCheckResponse response;
  return stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &response).ok() &&
         response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

// The processes of one learning run.
class Cluster {
 public:
  Cluster(const Options& o, std::string bin, Console* console)
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
  const Options& o_;
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

// What --resume continues: the run dir's one job, its held-out evaluations so far and the run's start.
struct PausedRun {
  std::string job_id;
  Json heldout = Json::Array();
  absl::Time start = absl::Now();
};

absl::StatusOr<PausedRun> ReadPausedRun(const std::string& run_dir) {
  PausedRun r;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir + "/learner-state/jobs", ec)) {
    if (!entry.is_directory()) continue;
    if (!r.job_id.empty()) return absl::FailedPreconditionError(run_dir + " holds more than one job");
    r.job_id = entry.path().filename().string();
  }
  if (r.job_id.empty()) return absl::NotFoundError("no job under " + run_dir + "/learner-state/jobs to resume");
  const std::string path = absl::StrCat(run_dir, "/learner-state/jobs/", r.job_id, "/curves/curves.json");
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  auto curves = ParseJson(*text);
  if (!curves.ok()) return absl::DataLossError(path + ": " + std::string(curves.status().message()));
  if (const Json* h = curves->Find("heldout")) r.heldout = *h;
  if (const Json* t = curves->Find("start_unix_ms")) r.start = absl::FromUnixMillis(static_cast<int64_t>(t->number()));
  return r;
}

// One held-out evaluation with `kernelrl eval` (this binary), as a child process.
absl::StatusOr<Json> HeldOutEval(const Options& o, const Cluster& c, const std::string& out_dir) {
  const std::string suffix = o.backend == "cpu" ? "_cpu" : "";
  std::vector<std::string> args = {
      SelfExe(), "eval", "--set=task_dirs=" + o.family_dir + "/heldout", "--set=output_dir=" + out_dir,
      absl::StrCat("--set=max_tasks_per_level=", o.eval_tasks), absl::StrCat("--set=rollouts_per_task=", o.eval_rollouts),
      "--set=plot_script=", "--set=actor.tokenizer_path=" + o.base_checkpoint + "/tokenizer.json",
      "--set=actor.sandbox.target=ipv4:" + c.sandbox_, "--set=actor.policy.kind=choice" + suffix,
      "--set=actor.policy.address=" + c.learner_, absl::StrCat("--set=actor.rollout.eval_max_turns=", o.eval_max_turns),
      absl::StrCat("--set=actor.rollout.temperature=", o.eval_temperature),
      // As many rollouts at once as all the training actors run: an evaluation beside training gets
      // half the sandbox instead of 1 / (actors + 1) of it, so it ends near the policy it started with.
      "--set=actor.rollout.workspace_root=" + out_dir + "-ws",
      absl::StrCat("--set=actor.concurrent_rollouts=", std::max(1, o.actors) * o.concurrent_rollouts)};
  for (const std::string& a : PromptFlags("--set=actor.rollout.", c.SkillPath())) args.push_back(a);
  std::error_code ec;
  fs::create_directories(out_dir + "-ws", ec);
  std::string cmd;
  for (const std::string& a : args) absl::StrAppend(&cmd, ShellQuote(a), " ");
  absl::StrAppend(&cmd, "> ", ShellQuote(out_dir + ".log"), " 2>&1");
  if (std::system(cmd.c_str()) != 0) return absl::InternalError("kernelrl eval failed; see " + out_dir + ".log");
  return HeldOutFromReport(out_dir + "/report.json");
}

std::string F(double v) { return absl::StrFormat("%.3g", v); }

// "; rollouts: reward m +- sem (n), ..." when the evaluation sampled more than one rollout per task.
std::string RolloutLine(const Json& heldout) {
  const Json* r = heldout.Find("rollouts");
  const Json* tasks = heldout.Find("n");
  if (r == nullptr || tasks == nullptr || r->Find("n")->number() <= tasks->number()) return "";
  return absl::StrCat("; per rollout (n ", F(r->Find("n")->number()), "): reward ", F(r->Find("reward_mean")->number()),
                      " +- ", F(r->Find("reward_sem")->number()), ", pass ", F(r->Find("pass_rate")->number()),
                      ", >eager ", F(r->Find("faster_than_eager_rate")->number()), ", >compile ",
                      F(r->Find("faster_than_compile_rate")->number()));
}

}  // namespace

int LearnMain(int argc, char** argv) {
  absl::StatusOr<Options> parsed = ParseFlags(argc, argv);
  if (absl::IsCancelled(parsed.status())) return std::printf("%s", kUsage), 0;
  if (!parsed.ok()) {
    std::fprintf(stderr, "kernelrl learn: %s\n%s", std::string(parsed.status().message()).c_str(), kUsage);
    return 2;
  }
  Options o = *parsed;
  if (o.learner_device.empty()) o.learner_device = o.backend;
  auto bin = FindBinDir(o.bin_dir);
  if (!bin.ok()) return std::fprintf(stderr, "kernelrl learn: %s\n", std::string(bin.status().message()).c_str()), 2;
  if (o.run_dir.empty()) o.run_dir = absl::StrCat("/tmp/kernelrl-learn-", getpid());
  if (o.plot_script.empty()) {
    for (const std::string& c : {*bin + "/tools/cli/learn_plots.py", std::string("tools/cli/learn_plots.py")}) {
      if (access(c.c_str(), R_OK) == 0) o.plot_script = c;
    }
  }
  std::error_code ec;
  fs::create_directories(o.run_dir, ec);
  if (ec) return std::fprintf(stderr, "kernelrl learn: --run_dir: %s\n", ec.message().c_str()), 2;
  absl::StatusOr<PausedRun> paused_run = o.resume ? ReadPausedRun(o.run_dir) : PausedRun{};
  if (!paused_run.ok()) {
    return std::fprintf(stderr, "kernelrl learn: --resume: %s\n", std::string(paused_run.status().message()).c_str()), 2;
  }
  Console console(o.run_dir + "/learn.log", paused_run->start);
  Cluster cluster(o, *bin, &console);
  if (!WriteFileAtomically(cluster.SkillPath(), kSkill).ok()) return 1;

  // The job: defaults, the ablation, then --job_set (later fields win).
  std::string hp = kJobDefaults;
  absl::StrAppend(&hp, " device { device: \"", o.learner_device, "\" dtype: \"float32\" }\n");
  if (o.ablation == "no_rft" || o.ablation == "no_rft_no_value") absl::StrAppend(&hp, " recipe { rft { skip: true } }\n");
  if (o.ablation == "no_value" || o.ablation == "no_rft_no_value") {
    absl::StrAppend(&hp, " recipe { value_pretrain { skip: true } }\n");
  }
  if (o.ablation == "no_rft_no_value") absl::StrAppend(&hp, " recipe { agent_warmup { skip: true } }\n");
  for (const std::string& s : o.job_sets) absl::StrAppend(&hp, TextField(s), "\n");
  {  // Held-out evaluations give the policy the turns it trains with.
    v1::LearnerJobConfig job_config;
    if (absl::Status s = MergeTextConfig(hp, "the job's hyperparameters", &job_config); !s.ok()) {
      return std::fprintf(stderr, "kernelrl learn: %s\n", std::string(s.message()).c_str()), 2;
    }
    if (job_config.recipe().agentic_ppo().max_turns() > 0) o.eval_max_turns = job_config.recipe().agentic_ppo().max_turns();
  }
  v1::JobSpec spec;
  spec.set_name(absl::StrCat("learn-family-", o.ablation));
  spec.set_base_checkpoint(o.base_checkpoint);
  spec.set_task_set(o.family_dir + "/train.jsonl");
  spec.set_rollouts_per_task(o.rollouts_per_task);
  spec.set_hyperparameters_text(hp);

  const absl::Time deadline = absl::Now() + absl::Seconds(o.job_timeout_s);
  console.Line("run dir " + o.run_dir + ", backend " + o.backend + ", ablation " + o.ablation);
  auto learner = cluster.StartServer(
      "learner", "learner/learner_main",
      {"--set=state_dir=" + o.run_dir + "/learner-state", "--set=policy.enabled=true",
       "--set=policy.model_path=" + o.base_checkpoint, "--set=policy.device=" + o.learner_device,
       "--set=policy.dtype=float32", "--set=policy.max_seq_len=16384", "--set=policy.max_batch=16"},
      absl::Now() + absl::Seconds(180));
  auto sandbox = learner.ok() ? cluster.StartServer("sandbox", "sandbox/sandbox_main",
                                                    // The vocabulary repeats candidates: identical (task, workspace)
                                                    // bytes reuse a verdict up to 16 times (curves.json audit:
                                                    // verdict_cache_hit_rate). --set=sandbox.verdict_cache.max_entries=0 turns it off.
                                                    {"--set=backend=" + o.backend, "--set=verdict_cache.max_entries=4096"},
                                                    absl::Now() + absl::Seconds(180))
                              : learner.status();
  if (!learner.ok() || !sandbox.ok()) {
    console.Line("FAILED to start: " + std::string((learner.ok() ? sandbox : learner).status().message()));
    cluster.StopAll();
    return 1;
  }
  cluster.learner_ = *learner;
  cluster.sandbox_ = *sandbox;

  auto stub = v1::Learner::NewStub(grpc::CreateChannel(*learner, grpc::InsecureChannelCredentials()));
  v1::Job job;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status s;
    if (o.resume) {  // The learner resumed it on start; it must still be RUNNING.
      v1::GetJobRequest get;
      get.set_job_id(paused_run->job_id);
      s = stub->GetJob(&ctx, get, &job);
      if (s.ok() && job.state() != v1::Job::RUNNING) {
        s = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                         absl::StrCat("job ", job.id(), " is ", v1::Job::State_Name(job.state()), ": nothing to resume"));
      }
    } else {
      v1::SubmitJobRequest req;
      *req.mutable_spec() = spec;
      s = stub->SubmitJob(&ctx, req, &job);
    }
    if (!s.ok()) {
      console.Line((o.resume ? "resume: " : "SubmitJob: ") + s.error_message());
      cluster.StopAll();
      return 1;
    }
  }
  const std::string job_dir = absl::StrCat(o.run_dir, "/learner-state/jobs/", job.id());
  const std::string curves_dir = job_dir + "/curves";
  fs::create_directories(curves_dir, ec);
  console.Line(o.resume ? absl::StrCat("job ", job.id(), " resumed at update ", job.step())
                         : absl::StrCat("job ", job.id(), " submitted: ", o.family_dir, "/train.jsonl"));

  // Held-out evaluations run one at a time beside the training, in their own thread.
  std::mutex eval_mu;
  Json heldout = paused_run->heldout;
  std::atomic<bool> eval_busy{false};
  std::thread eval_thread;
  auto start_eval = [&](const std::string& label, int64_t version, int64_t agentic_step) {
    if (eval_busy.exchange(true)) return false;
    if (eval_thread.joinable()) eval_thread.join();
    eval_thread = std::thread([&, label, version, agentic_step] {
      const double t0 = console.Seconds();
      auto r = HeldOutEval(o, cluster, curves_dir + "/eval-" + label);
      std::lock_guard<std::mutex> lock(eval_mu);
      if (r.ok()) {
        r->Set("label", Json::String(label));
        r->Set("policy_version", Json::Int(version));
        r->Set("agentic_step", Json::Int(agentic_step));
        r->Set("wall_s", Json::Number(t0));
        r->Set("eval_seconds", Json::Number(console.Seconds() - t0));
        console.Line(absl::StrCat("held-out eval ", label, " (policy v", version, "): reward ",
                                  F(r->Find("reward_mean")->number()), " +- ", F(r->Find("reward_sem")->number()),
                                  ", pass ", F(r->Find("pass_rate")->number()), ", >eager ",
                                  F(r->Find("faster_than_eager_rate")->number()), ", >compile ",
                                  F(r->Find("faster_than_compile_rate")->number()), RolloutLine(*r)));
        heldout.Push(std::move(*r));
      } else {
        console.Line("held-out eval " + label + " failed: " + std::string(r.status().message()));
      }
      eval_busy = false;
    });
    return true;
  };

  // The start evaluation runs before any actor does: the job cannot update the policy without
  // trajectories, so every one of its rollouts is policy v0's, and it has the sandbox to itself.
  if (!o.resume) {
    start_eval("start", 0, 0);
    eval_thread.join();
  }

  // Follow the job: switch actor pools by stage, show progress, trigger evaluations. The updates
  // themselves come from the ledger afterwards: a poll every 300 ms misses fast ones.
  int64_t last_eval_agentic = -1000;
  bool reached_agentic = false, evaluated_agentic = false, paused = false;
  if (o.resume && job.stage() == "agentic_ppo") evaluated_agentic = true, last_eval_agentic = job.stage_step();
  std::string last_line;
  absl::Time last_change = absl::Now();
  v1::GetJobRequest get;
  get.set_job_id(job.id());
  int code = 1;
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const grpc::Status s = stub->GetJob(&ctx, get, &job);
    if (s.ok()) {
      cluster.UsePool(job.stage() == "agent_warmup" ? "random" : "actor", job.policy_version());
      const std::string line = absl::StrCat(v1::Job::State_Name(job.state()), " ", job.stage(), " step ",
                                            job.stage_step(), " (update ", job.step(), ", policy v",
                                            job.policy_version(), ")  ", job.message());
      if (line != last_line) console.Line(line), last_change = absl::Now();
      last_line = line;
      if (job.stage() == "agentic_ppo") {
        const int64_t k = job.stage_step();
        reached_agentic = true;
        if ((!evaluated_agentic || k - last_eval_agentic >= o.eval_every) &&
            start_eval(absl::StrCat("agentic-", k), job.policy_version(), k)) {
          evaluated_agentic = true;
          last_eval_agentic = k;
        }
      }
      if (job.state() == v1::Job::SUCCEEDED || job.state() == v1::Job::FAILED || job.state() == v1::Job::CANCELLED) {
        code = job.state() == v1::Job::SUCCEEDED ? 0 : 1;
        break;
      }
      paused = job.state() == v1::Job::RUNNING &&
               ((o.pause_at_timeout && absl::Now() > deadline) ||
                (o.pause_after_agentic_steps > 0 && job.stage() == "agentic_ppo" &&
                 job.stage_step() >= o.pause_after_agentic_steps));
      if (paused) {
        console.Line("pausing: the services stop, the job stays RUNNING (kernelrl learn --resume --run_dir=" +
                     o.run_dir + " goes on)");
        cluster.StopActors();  // No more trajectories: the pause evaluation sees (about) the paused policy.
        code = 0;
        break;
      }
    }
    if (absl::Now() > deadline || absl::Now() - last_change > absl::Seconds(o.stall_timeout_s)) {
      console.Line("job timed out or stalled; cancelling");
      grpc::ClientContext cctx;
      v1::CancelJobRequest cancel;
      cancel.set_job_id(job.id());
      v1::Job ignored;
      stub->CancelJob(&cctx, cancel, &ignored);
      break;
    }
    absl::SleepFor(absl::Milliseconds(300));
  }
  // The final evaluation (after any running one), with the last policy; also when the
  // job was cut by --job_timeout_s during agentic PPO (its state says CANCELLED).
  if (eval_thread.joinable()) eval_thread.join();
  if (code == 0 || (reached_agentic && job.state() != v1::Job::FAILED)) {
    start_eval(paused ? absl::StrCat("pause-", job.step()) : "final", job.policy_version(), job.stage_step());
    if (eval_thread.joinable()) eval_thread.join();
  }
  cluster.StopAll();

  // Every committed update, as the learner recorded it.
  auto steps = UpdatesFromLedger(job_dir, console.StartUnixMs());
  if (!steps.ok()) {
    console.Line("no curves: the job's ledger cannot be read: " + std::string(steps.status().message()));
    return 1;
  }
  // Per update: the verdicts of the trajectories it trained on.
  TrainedAudit audit;
  auto trained = TrainedStats(job_dir, &audit);
  Json step_list = Json::Array();
  for (const Json& s : steps->items()) {
    Json copy = s;
    const int64_t step = static_cast<int64_t>(s.Find("step")->number());
    if (trained.ok() && trained->count(step)) copy.Set("trained", trained->at(step).ToJson());
    step_list.Push(std::move(copy));
  }
  std::lock_guard<std::mutex> lock(eval_mu);
  Json curves = Json::Object({{"job_id", Json::String(job.id())},
                              {"start_unix_ms", Json::Int(console.StartUnixMs())},
                              {"state", Json::String(v1::Job::State_Name(job.state()))},
                              {"ablation", Json::String(o.ablation)},
                              {"backend", Json::String(o.backend)},
                              {"family_dir", Json::String(o.family_dir)},
                              {"hyperparameters_text", Json::String(hp)},
                              {"steps", std::move(step_list)},
                              {"heldout", heldout},
                              {"audit", audit.ToJson()}});
  if (!WriteFileAtomically(curves_dir + "/curves.json", curves.Dump(1) + "\n").ok()) code = 1;
  console.Line(absl::StrCat("audit: ", audit.ToJson().Dump()));
  if (!o.plot_script.empty()) {
    const std::string cmd = absl::StrCat(ShellQuote(o.python), " ", ShellQuote(o.plot_script), " ",
                                         ShellQuote(curves_dir + "/curves.json"), " ", ShellQuote(curves_dir), " > ",
                                         ShellQuote(curves_dir + "/plots.log"), " 2>&1");
    if (std::system(cmd.c_str()) != 0) console.Line("plots failed; see " + curves_dir + "/plots.log");
  }
  console.Line(absl::StrCat("job ", job.id(), " ", v1::Job::State_Name(job.state()), "; curves in ", curves_dir));
  return code;
}

}  // namespace kernelrl::cli
