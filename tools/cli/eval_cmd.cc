#include "tools/cli/eval_cmd.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "actor/eval_report.h"
#include "agent/policy/policy_factory.h"
#include "actor/rollout.h"
#include "actor/transcript.h"
#include "actor/sandbox_pool.h"
#include "agent/chat/tools.h"
#include "common/config.h"
#include "common/file.h"
#include "common/log.h"
#include "common/text.h"
#include "data/rng.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/gpu_presence.h"
#include "actor/defaults.h"
#include "google/protobuf/text_format.h"
#include "proto/actor_config.pb.h"
#include "proto/cli_config.pb.h"
#include "tools/cli/command_line.h"
#include "tools/cli/eval_schedule.h"
#include "tools/cli/local_cluster.h"
#include "sandbox/workspace_files.h"

namespace kernelrl::cli {
namespace {

// `kernelrl eval`'s own fields; its actor starts from the actor's defaults
// (actor/defaults.h) and changes only what evaluation does differently.
constexpr char kEvalDefaults[] = R"pb(
  rollouts_per_task: 1
  output_dir: "eval_out"
  plot_script: "tools/cli/eval_plots.py"
  python: "python3"
  kernelbench_dir: "../shared/kernelbench"
  sandbox_backend: "auto"
  checkpoint_device: "cpu"
  transcripts: true
  trajectories: true
)pb";

std::string EvalDefaultsText() {
  v1::EvalConfig config;
  google::protobuf::TextFormat::ParseFromString(kEvalDefaults, &config);
  v1::ActorConfig& a = *config.mutable_actor() = actor::ActorDefaults();
  a.clear_learner_address();  // Evaluation reports to no learner.
  a.clear_learner();
  a.set_concurrent_rollouts(4);  // One machine shares its cores with the local sandbox.
  a.set_tokenizer_path("");
  v1::RolloutConfig& r = *a.mutable_rollout();
  r.set_wall_seconds(3600);
  r.set_temperature(0.0);  // Greedy: a report is reproducible.
  r.set_workspace_root("/var/tmp/kernelrl-eval");
  // The scripted policy replays the repository's reference solutions;
  // --policy picks another.
  a.clear_policy();
  a.mutable_policy()->set_kind("scripted");
  a.mutable_policy()->set_scripted_solutions_dir("sandbox/solutions");
  a.mutable_policy()->set_timeout_seconds(600);
  a.mutable_policy()->set_max_retries(2);
  a.mutable_sandbox()->set_target("");  // "": start a local sandbox worker.
  std::string text;
  google::protobuf::TextFormat::PrintToString(config, &text);
  return text;
}

// The flags of `kernelrl eval`, each onto fields of kernelrl.v1.EvalConfig.
void AddFlags(CommandLine& cl) {
  cl.Flag(
      "--policy",
      [&cl](const std::string& v) -> absl::StatusOr<std::string> {
        const size_t colon = v.find(':');
        const std::string kind = v.substr(0, colon), arg = colon == std::string::npos ? "" : v.substr(colon + 1);
        if (kind == "openai" && arg.empty()) {
          // Any OpenAI-compatible server: chat messages, replies re-tokenized (evaluation only).
          return std::string("actor { policy { kind: \"openai_chat\" allow_retokenize: true } }");
        }
        if (kind == "checkpoint" && !arg.empty()) {
          auto text = cl.Assign("checkpoint", arg);
          if (!text.ok()) return text;
          auto tok = cl.Assign("actor.tokenizer_path", arg + "/tokenizer.json");
          if (!tok.ok()) return tok;
          return absl::StrCat(*text, " ", *tok, " actor { policy { kind: \"grpc\" } }");
        }
        if (kind == "scripted" && !arg.empty()) {
          auto text = cl.Assign("actor.policy.scripted_solutions_dir", arg);
          if (!text.ok()) return text;
          return *text + " actor { policy { kind: \"scripted\" } }";
        }
        if (kind == "grpc" && !arg.empty()) {
          auto text = cl.Assign("actor.policy.address", arg);
          if (!text.ok()) return text;
          return *text + " actor { policy { kind: \"grpc\" } }";
        }
        return absl::InvalidArgumentError("openai, checkpoint:DIR, scripted:DIR or grpc:ADDRESS");
      },
      "openai (with --endpoint, --model), checkpoint:DIR (served here), scripted:DIR (reference solutions) or "
      "grpc:ADDRESS (a kernelrl.v1.Policy server) [actor.policy, checkpoint]");
  cl.Flag("--endpoint", "actor.policy.address", "Base URL of the OpenAI-compatible server (http://host:port)");
  cl.Flag("--model", "actor.policy.model", "The OpenAI \"model\" field");
  cl.Flag("--api_key_file", "actor.policy.api_key_file", "File holding the bearer token");
  cl.Flag("--tokenizer", "actor.tokenizer_path", "tokenizer.json of the policy's model (the chat format's tokens)");
  cl.Flag(
      "--tasks",
      [&cl](const std::string& v) -> absl::StatusOr<std::string> {
        const std::vector<std::string> parts = absl::StrSplit(v, absl::MaxSplits(':', 2));
        if (parts[0] != "kernelbench" || parts.size() < 2 || !absl::StartsWith(parts[1], "level")) {
          auto text = cl.Assign("task_dirs", v);  // A directory of tasks.
          return text;
        }
        auto text = cl.Assign("task_dirs", "kernelbench:" + parts[1]);
        if (!text.ok() || parts.size() < 3) return text;
        std::string out = *text;
        for (absl::string_view id : absl::StrSplit(parts[2], ',', absl::SkipEmpty())) {
          auto one = cl.Assign("task_ids", absl::StrCat(parts[1], "/", id));
          if (!one.ok()) return one;
          absl::StrAppend(&out, " ", *one);
        }
        return out;
      },
      "kernelbench:levelN[:ID,ID,...] (IDs: the task's number or file name) or a directory of tasks "
      "[task_dirs, task_ids]");
  cl.Flag("--kernelbench_dir", "kernelbench_dir", "The KernelBench checkout (level1/, ...)");
  cl.Flag("--max_tasks", "max_tasks_per_level", "At most this many tasks per level (0 = all)");
  cl.Flag("--rollouts", "rollouts_per_task", "Rollouts per task (the best one is scored)");
  cl.Flag("--out", "output_dir", "report.json, report.md, the plots and transcripts/ go here");
  cl.Switch("--transcripts", "transcripts", "Write every rollout's turns as text to transcripts/<task>-<k>.txt");
  cl.Switch("--trajectories", "trajectories", "Keep every rollout's Trajectory as trajectories/<task>-<k>.pb");
  cl.Flag("--sandbox", "actor.sandbox.target", "gRPC target of sandbox workers (\"\": start one here)");
  cl.Flag("--sandbox_backend", "sandbox_backend", "The started sandbox's backend: auto, cpu or cuda");
  cl.Flag("--concurrency", "actor.concurrent_rollouts", "Rollouts at once");
  cl.Flag("--wall_limit_s", "wall_limit_s",
          "Seconds for the whole evaluation (0 = none): then the finished tasks are reported, the rest named in "
          "report.json's \"cut\"");
  cl.Flag("--max_turns", "actor.rollout.eval_max_turns", "Assistant turns per rollout");
  cl.Flag("--max_new_tokens", "actor.rollout.max_new_tokens_per_turn", "Tokens per assistant turn");
  cl.Flag("--temperature", "actor.rollout.temperature", "0 = greedy");
  cl.Flag("--run_dir", "paths.run_dir", "Logs of the services started here");
  cl.Flag("--bin_dir", "paths.bin_dir", "Service binaries (bazel-bin)");
}

struct EvalTask {
  v1::Task task;
};

absl::StatusOr<std::vector<EvalTask>> LoadTasks(const v1::EvalConfig& config) {
  std::vector<EvalTask> out;
  for (std::string dir : config.task_dirs()) {
    if (absl::StartsWith(dir, "kernelbench:")) dir = config.kernelbench_dir() + "/" + dir.substr(12);
    const std::string level_name = std::filesystem::path(dir).filename().string();
    int level = 0;
    if (absl::StartsWith(level_name, "level")) level = std::atoi(level_name.c_str() + 5);
    std::vector<std::string> files;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".py") files.push_back(e.path().string());
    }
    if (ec) return absl::NotFoundError(absl::StrCat("task_dirs: ", dir, ": ", ec.message()));
    std::sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
      auto num = [](const std::string& p) { return std::atoi(std::filesystem::path(p).filename().c_str()); };
      return num(a) != num(b) ? num(a) < num(b) : a < b;
    });
    int taken = 0;
    for (const std::string& f : files) {
      const std::string id = absl::StrCat(level_name, "/", std::filesystem::path(f).stem().string());
      // "level1/19" names "level1/19_ReLU": the number is KernelBench's id.
      auto wanted = [&id](const std::string& want) { return id == want || absl::StartsWith(id, want + "_"); };
      if (!config.task_ids().empty() && std::none_of(config.task_ids().begin(), config.task_ids().end(), wanted)) {
        continue;
      }
      if (config.max_tasks_per_level() > 0 && taken >= config.max_tasks_per_level()) break;
      absl::StatusOr<v1::Task> task = sandbox::ReadTaskFile(f, id);
      if (!task.ok()) return task.status();
      task->set_level(level);
      out.push_back({*task});
      ++taken;
    }
  }
  if (out.empty()) return absl::InvalidArgumentError("no tasks: set --tasks (task_dirs, task_ids)");
  return out;
}


// The sandbox (when actor.sandbox.target is "") and the checkpoint's policy server (when
// checkpoint is set) on this machine, through the shared launcher; their addresses go into the
// actor's config.
absl::Status StartLocalServices(v1::EvalConfig* config, std::unique_ptr<LocalCluster>* local) {
  const bool need_sandbox = config->actor().sandbox().target().empty();
  if (!need_sandbox && config->checkpoint().empty()) return absl::OkStatus();
  if (absl::Status s = ResolvePaths("eval", config->mutable_paths()); !s.ok()) return s;
  *local = std::make_unique<LocalCluster>(config->paths().bin_dir(), config->paths().run_dir(),
                                          [](const up::SupervisorEvent& e) {
                                            if (e.kind == up::SupervisorEvent::kGaveUp) KLOG(ERROR) << e.name << ": " << e.detail;
                                          });
  const absl::Time deadline = absl::Now() + absl::Seconds(180);
  if (need_sandbox) {
    const std::string backend = config->sandbox_backend() == "auto" ? (GpuDevicePresent() ? "cuda" : "cpu")
                                                                    : config->sandbox_backend();
    auto ports = (*local)->StartServer("sandbox", "sandbox/sandbox_main", {"--set=backend=" + backend}, deadline);
    if (!ports.ok()) return ports.status();
    if (!LocalCluster::WaitServing(ports->Address(), deadline)) return absl::UnavailableError("the sandbox is not serving");
    config->mutable_actor()->mutable_sandbox()->set_target("ipv4:" + ports->Address());
    std::fprintf(stderr, "kernelrl eval: a %s sandbox at %s (log: %s/sandbox.log)\n", backend.c_str(),
                 ports->Address().c_str(), config->paths().run_dir().c_str());
  }
  if (!config->checkpoint().empty()) {
    auto ports = (*local)->StartServer(
        "policy", "learner/learner_main",
        {"--set=state_dir=" + config->paths().run_dir() + "/policy-state", "--set=policy.enabled=true",
         "--set=policy.model_path=" + config->checkpoint(), "--set=policy.device=" + config->checkpoint_device()},
        deadline);
    if (!ports.ok()) return ports.status();
    if (!LocalCluster::WaitServing(ports->Address(), deadline)) return absl::UnavailableError("the policy server is not serving");
    config->mutable_actor()->mutable_policy()->set_address(ports->Address());
    std::fprintf(stderr, "kernelrl eval: policy server on %s at %s\n", config->checkpoint().c_str(),
                 ports->Address().c_str());
  }
  return absl::OkStatus();
}

// A file of the source tree (plot_script, rollout.skill_path) as given when it exists, else under
// this binary's runfiles or paths.repo_dir.
std::string FindRepoFile(const v1::EvalConfig& config, const std::string& p) {
  if (p.empty() || p[0] == '/' || access(p.c_str(), R_OK) == 0) return p;
  for (const std::string& root : {SelfExe() + ".runfiles/kernelrl", config.paths().repo_dir()}) {
    if (!root.empty() && access((root + "/" + p).c_str(), R_OK) == 0) return root + "/" + p;
  }
  return p;
}

}  // namespace

int EvalMain(int argc, char** argv) {
  v1::EvalConfig config;
  CommandLine cl("eval", "Run a policy over a task set; Table-1 report (report.json, report.md, plots).", &config);
  AddFlags(cl);
  // The wall-clock limit counts from here: the services' start and the tokenizer's load are in it.
  const absl::Time start = absl::Now();
  if (std::optional<int> code = cl.Parse(argc, argv, EvalDefaultsText())) return *code;
  std::unique_ptr<LocalCluster> local;
  struct StopOnExit {
    std::unique_ptr<LocalCluster>* local;
    ~StopOnExit() {
      if (*local) (*local)->StopAll(absl::Seconds(20));
    }
  } stop_on_exit{&local};
  auto tasks = LoadTasks(config);
  if (!tasks.ok()) return cl.Fail(std::string(tasks.status().message()));
  if (absl::Status s = StartLocalServices(&config, &local); !s.ok()) {
    std::fprintf(stderr, "kernelrl eval: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const v1::ActorConfig& actor = config.actor();
  auto tokenizer = agent::Tokenizer::Load(actor.tokenizer_path());
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "kernelrl eval: actor.tokenizer_path: %s\n", std::string(tokenizer.status().message()).c_str());
    return 2;
  }
  auto with_tools = agent::ChatFormat::Create(tokenizer->get(), agent::ToolSchemas());
  auto plain = agent::ChatFormat::Create(tokenizer->get(), Json::array());
  if (!with_tools.ok() || !plain.ok()) {
    std::fprintf(stderr, "kernelrl eval: %s\n", with_tools.status().ToString().c_str());
    return 2;
  }
  auto policy = agent::MakePolicyClient(actor.policy(), tokenizer->get(), plain->im_end_id());
  auto pool = actor::SandboxPool::Create(actor.sandbox());
  if (!policy.ok() || !pool.ok()) {
    std::fprintf(stderr, "kernelrl eval: %s %s\n", policy.status().ToString().c_str(), pool.status().ToString().c_str());
    return 2;
  }
  std::string skill;
  if (!actor.rollout().skill_path().empty()) {
    auto s = ReadFileToString(FindRepoFile(config, actor.rollout().skill_path()));
    if (!s.ok()) {
      std::fprintf(stderr, "kernelrl eval: rollout.skill_path: %s\n", std::string(s.status().message()).c_str());
      return 2;
    }
    skill = *s;
  }
  actor::RolloutRunner runner(actor::RolloutDeps{policy->get(), pool->get(), tokenizer->get(), &*with_tools, &*plain},
                              actor.rollout(), skill);

  const std::string transcripts_dir = config.output_dir() + "/transcripts";
  const std::string trajectories_dir = config.output_dir() + "/trajectories";
  for (const auto& [on, dir] : {std::pair{config.transcripts(), transcripts_dir},
                                std::pair{config.trajectories(), trajectories_dir}}) {
    if (!on) continue;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      std::fprintf(stderr, "kernelrl eval: %s: %s\n", dir.c_str(), ec.message().c_str());
      return 1;
    }
  }
  std::atomic<int> passed{0};
  std::mutex print_mu;
  const auto t0 = std::chrono::steady_clock::now();
  auto progress = [&](int done) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard<std::mutex> l(print_mu);
    std::fprintf(stderr, "\r[eval] %d/%zu tasks, %d pass, %.0f s elapsed   ", done, tasks->size(), passed.load(), s);
    std::fflush(stderr);
  };
  EvalSchedule schedule;
  for (const EvalTask& t : *tasks) schedule.task_ids.push_back(t.task.id());
  schedule.rollouts_per_task = std::max(1, config.rollouts_per_task());
  schedule.workers = std::max(1, actor.concurrent_rollouts());
  schedule.wall_limit_s = config.wall_limit_s();
  schedule.start = start;
  schedule.rollout = [&](size_t i, int k, actor::TaskResult* r) {
    const v1::Task& task = (*tasks)[i].task;
    if (k == 0) {
      r->level = task.level();
      r->best.set_outcome(v1::Verdict::OUTCOME_UNSPECIFIED);
    }
    // Seeded by the task and k: a sampled evaluation of one policy gives the same rollouts again.
    auto out = runner.Run(task, actor::RolloutOptions{true, absl::StrCat("eval/", task.id(), "/", k), "eval",
                                                      SeedOf(StableHash(task.id()), static_cast<uint64_t>(k))});
    ++r->rollouts;
    if (!out.ok()) {
      KLOG(ERROR) << task.id() << ": " << out.status();
      r->stop_reason = "error";  // No trajectory, so no entry in r->finals.
      return;
    }
    if (config.transcripts()) {
      const std::string path = transcripts_dir + "/" + actor::TranscriptFileName(task.id(), k);
      if (absl::Status s = WriteFileAtomically(path, actor::Transcript(out->trajectory)); !s.ok()) {
        KLOG(ERROR) << path << ": " << s;
      }
    }
    if (config.trajectories()) {
      const std::string path = trajectories_dir + "/" + actor::TrajectoryFileName(task.id(), k);
      if (absl::Status s = WriteFileAtomically(path, out->trajectory.SerializeAsString()); !s.ok()) {
        KLOG(ERROR) << path << ": " << s;
      }
    }
    const bool have = !r->finals.empty();  // An earlier rollout of this task gave a verdict.
    r->finals.push_back(out->trajectory.has_final_verdict() ? out->trajectory.final_verdict() : v1::Verdict());
    if (!out->trajectory.has_final_verdict()) r->finals.back().set_reward(out->trajectory.reward());
    r->wall_seconds += out->wall_seconds;
    r->turns = out->trajectory.stats().num_turns();
    r->stop_reason = out->trajectory.stats().stop_reason();
    const v1::Verdict& v = out->best_verdict;
    const bool better = !have || (v.outcome() == v1::Verdict::OK &&
                                  (r->best.outcome() != v1::Verdict::OK ||
                                   v.speedup_vs_compile() > r->best.speedup_vs_compile()));
    if (better) r->best = v;
  };
  schedule.on_task_done = [&](const actor::TaskResult& r, int done) {
    passed += r.best.outcome() == v1::Verdict::OK;
    progress(done);
  };
  progress(0);
  EvalRun run = RunEvalTasks(schedule);
  std::fprintf(stderr, "\n");
  if (run.cut.has_value()) {
    std::fprintf(stderr, "kernelrl eval: cut at the %g s limit: %zu of %zu tasks scored; %zu unfinished (%d rollouts)%s\n",
                 config.wall_limit_s(), run.results.size(), tasks->size(), run.cut->tasks_unfinished.size(),
                 run.cut->rollouts_unfinished, run.abandoned ? ", their rollouts in progress abandoned" : "");
  }
  // Abandoned workers are still inside rollouts that use this function's runner, policy, pool and
  // tasks: unwinding them (or returning, or exit() running static destructors) would pull those out
  // from under the workers. So the report is written first, the services this evaluation started
  // are stopped, and the process ends at once with std::_Exit, its output flushed by hand.
  auto finish = [&run, &local](int code) {
    if (!run.abandoned) return code;
    if (local) local->StopAll(absl::Seconds(20));
    std::fflush(nullptr);
    std::_Exit(code);
  };
  const std::vector<actor::TaskResult>& results = run.results;
  const std::vector<actor::LevelSummary> levels = actor::Summarize(results);
  std::error_code ec;
  std::filesystem::create_directories(config.output_dir(), ec);
  const std::string json_path = config.output_dir() + "/report.json";
  const std::string md = actor::ReportMarkdown(results, levels, run.cut);
  if (!WriteFileAtomically(json_path, actor::ReportJson(results, levels, run.cut)).ok() ||
      !WriteFileAtomically(config.output_dir() + "/report.md", md).ok()) {
    std::fprintf(stderr, "kernelrl eval: cannot write to %s\n", config.output_dir().c_str());
    return finish(1);
  }
  std::printf("%s", md.c_str());
  if (const std::string plots = FindRepoFile(config, config.plot_script()); !plots.empty()) {
    const std::string cmd = absl::StrCat(config.python(), " ", ShellQuote(plots), " ",
                                         ShellQuote(json_path), " ", ShellQuote(config.output_dir()));
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "kernelrl eval: plots failed (%s)\n", cmd.c_str());
  }
  std::fprintf(stderr, "kernelrl eval: report in %s\n", config.output_dir().c_str());
  return finish(0);
}

}  // namespace kernelrl::cli
