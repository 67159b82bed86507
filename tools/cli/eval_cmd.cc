#include "tools/cli/eval_cmd.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "actor/eval_report.h"
#include "agent/policy/policy_factory.h"
#include "actor/rollout.h"
#include "actor/sandbox_pool.h"
#include "agent/chat/tools.h"
#include "common/config.h"
#include "common/file.h"
#include "common/log.h"
#include "common/text.h"
#include "proto/actor_config.pb.h"
#include "sandbox/workspace_files.h"

namespace kernelrl::cli {
namespace {

constexpr char kDefaults[] = R"pb(
  actor {
    concurrent_rollouts: 4
    tokenizer_path: ""
    rollout {
      max_turns: 150
      eval_max_turns: 200
      context_tokens: 131072
      wall_seconds: 3600
      max_new_tokens_per_turn: 8192
      temperature: 0.0
      top_p: 1.0
      workspace_root: "/var/tmp/kernelrl-eval"
      skill_path: "sandbox/SKILL.md"
      final_evaluation: true
      tools {
        bash_default_timeout_s: 120
        bash_max_timeout_s: 600
        output_cap_bytes: 30000
        read_max_lines: 2000
        max_file_bytes: 1048576
        max_background_jobs: 4
      }
      isolation { contain: true tmp_bytes: 268435456 data_bytes: 8589934592 file_bytes: 268435456 cpu_seconds: 3600 max_open_files: 1024 }
    }
    policy { kind: "scripted" scripted_solutions_dir: "sandbox/solutions" timeout_seconds: 600 max_retries: 2 }
    sandbox { target: "ipv4:127.0.0.1:50052" health_check: true deadline_seconds: 900 retries: 1 }
  }
  rollouts_per_task: 1
  output_dir: "eval_out"
  plot_script: "tools/cli/eval_plots.py"
  python: "python3"
)pb";

struct EvalTask {
  v1::Task task;
};

absl::StatusOr<std::vector<EvalTask>> LoadTasks(const v1::EvalConfig& config) {
  std::vector<EvalTask> out;
  for (const std::string& dir : config.task_dirs()) {
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
      if (!config.task_ids().empty() &&
          std::find(config.task_ids().begin(), config.task_ids().end(), id) == config.task_ids().end()) {
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
  if (out.empty()) return absl::InvalidArgumentError("no tasks: set task_dirs (and task_ids)");
  return out;
}

}  // namespace

int EvalMain(int argc, char** argv) {
  v1::EvalConfig config;
  absl::StatusOr<ConfigRequest> req = LoadConfig(argc, argv, kDefaults, &config);
  if (!req.ok()) {
    std::fprintf(stderr, "kernelrl eval: %s\n", std::string(req.status().message()).c_str());
    return 2;
  }
  if (req->help) {
    std::printf("%s", ConfigUsage("kernelrl eval", "kernelrl.v1.EvalConfig").c_str());
    return 0;
  }
  if (req->print_config) {
    std::printf("%s", config.DebugString().c_str());
    return 0;
  }
  const v1::ActorConfig& actor = config.actor();
  auto tasks = LoadTasks(config);
  if (!tasks.ok()) {
    std::fprintf(stderr, "kernelrl eval: %s\n", std::string(tasks.status().message()).c_str());
    return 2;
  }
  auto tokenizer = agent::Tokenizer::Load(actor.tokenizer_path());
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "kernelrl eval: actor.tokenizer_path: %s\n", std::string(tokenizer.status().message()).c_str());
    return 2;
  }
  auto with_tools = agent::ChatFormat::Create(tokenizer->get(), agent::ToolSchemas());
  auto plain = agent::ChatFormat::Create(tokenizer->get(), Json::Array());
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
    auto s = ReadFileToString(actor.rollout().skill_path());
    if (!s.ok()) {
      std::fprintf(stderr, "kernelrl eval: rollout.skill_path: %s\n", std::string(s.status().message()).c_str());
      return 2;
    }
    skill = *s;
  }
  actor::RolloutRunner runner(actor::RolloutDeps{policy->get(), pool->get(), tokenizer->get(), &*with_tools, &*plain},
                              actor.rollout(), skill);

  const int rollouts = std::max(1, config.rollouts_per_task());
  std::vector<actor::TaskResult> results(tasks->size());
  std::atomic<size_t> next{0};
  std::atomic<int> done{0}, passed{0};
  std::mutex print_mu;
  const auto t0 = std::chrono::steady_clock::now();
  auto progress = [&] {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard<std::mutex> l(print_mu);
    std::fprintf(stderr, "\r[eval] %d/%zu tasks, %d pass, %.0f s elapsed   ", done.load(), tasks->size(),
                 passed.load(), s);
    std::fflush(stderr);
  };
  auto worker = [&] {
    for (size_t i = next++; i < tasks->size(); i = next++) {
      const v1::Task& task = (*tasks)[i].task;
      actor::TaskResult& r = results[i];
      r.task_id = task.id();
      r.level = task.level();
      r.best.set_outcome(v1::Verdict::OUTCOME_UNSPECIFIED);
      bool have = false;
      for (int k = 0; k < rollouts; ++k) {
        auto out = runner.Run(task, actor::RolloutOptions{true, absl::StrCat("eval/", task.id(), "/", k), "eval", 0});
        ++r.rollouts;
        if (!out.ok()) {
          KLOG(ERROR) << task.id() << ": " << out.status();
          r.stop_reason = "error";  // No trajectory, so no entry in r.finals.
          continue;
        }
        r.finals.push_back(out->trajectory.has_final_verdict() ? out->trajectory.final_verdict() : v1::Verdict());
        if (!out->trajectory.has_final_verdict()) r.finals.back().set_reward(out->trajectory.reward());
        r.wall_seconds += out->wall_seconds;
        r.turns = out->trajectory.stats().num_turns();
        r.stop_reason = out->trajectory.stats().stop_reason();
        const v1::Verdict& v = out->best_verdict;
        const bool better = !have || (v.outcome() == v1::Verdict::OK &&
                                      (r.best.outcome() != v1::Verdict::OK ||
                                       v.speedup_vs_compile() > r.best.speedup_vs_compile()));
        if (better) r.best = v;
        have = true;
      }
      passed += r.best.outcome() == v1::Verdict::OK;
      ++done;
      progress();
    }
  };
  progress();
  std::vector<std::thread> threads;
  for (int i = 0; i < std::max(1, actor.concurrent_rollouts()); ++i) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  std::fprintf(stderr, "\n");

  const std::vector<actor::LevelSummary> levels = actor::Summarize(results);
  std::error_code ec;
  std::filesystem::create_directories(config.output_dir(), ec);
  const std::string json_path = config.output_dir() + "/report.json";
  const std::string md = actor::ReportMarkdown(results, levels);
  if (!WriteFileAtomically(json_path, actor::ReportJson(results, levels)).ok() ||
      !WriteFileAtomically(config.output_dir() + "/report.md", md).ok()) {
    std::fprintf(stderr, "kernelrl eval: cannot write to %s\n", config.output_dir().c_str());
    return 1;
  }
  std::printf("%s", md.c_str());
  if (!config.plot_script().empty()) {
    const std::string cmd = absl::StrCat(config.python(), " ", ShellQuote(config.plot_script()), " ",
                                         ShellQuote(json_path), " ", ShellQuote(config.output_dir()));
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "kernelrl eval: plots failed (%s)\n", cmd.c_str());
  }
  std::fprintf(stderr, "kernelrl eval: report in %s\n", config.output_dir().c_str());
  return 0;
}

}  // namespace kernelrl::cli
