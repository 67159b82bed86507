#include "tools/cli/learn_report.h"

#include <algorithm>
#include <filesystem>
#include <functional>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "actor/eval_report.h"
#include "profiler_service/stats.h"
#include "tools/cli/learn_cluster.h"

namespace kernelrl::cli {
namespace {

constexpr int kCells = 24;

std::string Pct(double x) { return absl::StrFormat("%.0f%%", 100 * x); }

// What agentic PPO trained on and where its time went, and the audit of the trained verdicts:
// what a sitting otherwise reads out of curves.json by hand.
std::string TrainingLines(const Json& steps, const Json& audit) {
  std::string out;
  int updates = 0;
  double trajectories = 0, tokens = 0, dropped_groups = 0, rolled = 0, wall = 0, policy = 0, sandbox = 0;
  std::vector<double> ev;
  for (const Json& s : steps) {
    const Json* stage = FindJson(s, "stage");
    if (stage == nullptr || !stage->is_string() || stage->get<std::string>() != "agentic_ppo") continue;
    ++updates;
    const Json* m = FindJson(s, "metrics");
    trajectories += FigureOf(m, "trajectories");
    tokens += FigureOf(m, "model_tokens");
    dropped_groups = std::max(dropped_groups, FigureOf(m, "zero_variance_groups_dropped_total"));
    if (m != nullptr && FindJson(*m, "explained_variance") != nullptr) ev.push_back(FigureOf(m, "explained_variance"));
    const Json* t = FindJson(s, "trained");
    const double n = FigureOf(t, "n");
    if (n > 0 && FindJson(*t, "rollout_wall_s_mean") != nullptr) {
      rolled += n;
      wall += n * FigureOf(t, "rollout_wall_s_mean");
      policy += n * FigureOf(t, "rollout_policy_s_mean");
      sandbox += n * FigureOf(t, "rollout_sandbox_s_mean");
    }
  }
  if (updates > 0) {
    absl::StrAppendFormat(&out, "PPO        %d updates: %.0f trajectories trained, %.0f groups of one reward dropped",
                          updates, trajectories, dropped_groups);
    if (rolled > 0) {
      absl::StrAppendFormat(&out, "; a trained rollout %.0f s\n           (policy %.0f s, sandbox %.0f s)", wall / rolled,
                            policy / rolled, sandbox / rolled);
    }
    if (trajectories > 0) absl::StrAppendFormat(&out, "; model tokens a trajectory %.0f", tokens / trajectories);
    if (!ev.empty()) {
      absl::StrAppendFormat(&out, "; critic explained variance\n           %.2f (median of %d updates; %.2f to %.2f)",
                            Median(ev), static_cast<int>(ev.size()), *std::min_element(ev.begin(), ev.end()),
                            *std::max_element(ev.begin(), ev.end()));
    }
    absl::StrAppend(&out, "\n");
  }
  if (FigureOf(&audit, "trajectories_trained") > 0) {
    absl::StrAppendFormat(
        &out,
        "audit      %.0f trained: hack-flagged %.0f (paid > 1: %.0f), other flags paid > 1: %.0f; verdict cache %s, "
        "compile cache %s\n",
        FigureOf(&audit, "trajectories_trained"), FigureOf(&audit, "hack_flagged"),
        FigureOf(&audit, "hack_flagged_with_reward_above_1"), FigureOf(&audit, "integrity_flagged_with_reward_above_1"),
        Pct(FigureOf(&audit, "verdict_cache_hit_rate")), Pct(FigureOf(&audit, "compile_cache_hit_rate")));
    if (FigureOf(&audit, "profiled_verdicts") > 0) {
      absl::StrAppendFormat(&out, "           a profiled verdict %.1f s p50 (%.0f fresh): %.1f s waiting for the GPU",
                            FigureOf(&audit, "profiled_verdict_wall_s_p50"), FigureOf(&audit, "profiled_verdicts"),
                            FigureOf(&audit, "profiled_verdict_gpu_queue_s_p50"));
      if (FindJson(audit, "profiled_verdict_lease_settle_s_p50") != nullptr) {
        absl::StrAppendFormat(&out, ", %.2f s settling after the lease",
                              FigureOf(&audit, "profiled_verdict_lease_settle_s_p50"));
      }
      absl::StrAppend(&out, "\n");
    }
  }
  return out;
}

}  // namespace

double FigureOf(const Json* object, const char* key) {
  const Json* v = object == nullptr ? nullptr : FindJson(*object, key);
  return v != nullptr && v->is_number() ? JsonNumber(*v) : 0;
}

const Json& PerRolloutFigures(const Json& eval) {
  const Json* r = FindJson(eval, "rollouts");
  return r != nullptr && FigureOf(r, "n") > 0 ? *r : eval;
}

int64_t StageProgress::StepsOf(const std::string& stage) const {
  const v1::RecipeConfig& r = job_.recipe();
  if (stage == "single_turn_ppo") return r.single_turn_ppo().steps();
  if (stage == "agent_warmup") return r.agent_warmup().steps();
  if (stage == "value_pretrain") return r.value_pretrain().steps();
  if (stage == "agentic_ppo") return r.agentic_ppo().steps();
  return 0;  // rft: its updates follow from the kept trajectories.
}

std::string StageProgress::Bar(const std::string& stage, int64_t step, int64_t steps, int64_t version) {
  const char* unit = stage == "agent_warmup" ? "trajectories" : "updates";
  if (steps <= 0) return absl::StrFormat("%-16s %d %s (policy v%d)", stage, step, unit, version);
  const int filled = static_cast<int>(std::min<int64_t>(kCells, step * kCells / steps));
  return absl::StrFormat("%-16s [%s%s] %3d/%d %s (policy v%d)", stage, std::string(filled, '#'),
                         std::string(kCells - filled, '.'), step, steps, unit, version);
}

std::vector<std::string> StageProgress::Update(const v1::Job& job) {
  if (job.stage().empty()) return {};
  const int64_t steps = StepsOf(job.stage());
  // No total (RFT: its updates follow from the kept trajectories): a line every 5 updates.
  const int cells = steps > 0 ? static_cast<int>(std::min<int64_t>(kCells, job.stage_step() * kCells / steps))
                              : static_cast<int>(job.stage_step() / 5);
  if (job.stage() == stage_ && cells == cells_) return {};
  std::vector<std::string> lines;
  if (job.stage() != stage_) {
    // The warm-up's steps are trajectories, every other stage's are updates of the job.
    const int64_t start = job.step() - (job.stage() == "agent_warmup" ? 0 : job.stage_step());
    const int64_t made = start - stage_start_;
    if (!stage_.empty() && stage_ != "agent_warmup" && made != shown_step_) {
      lines.push_back(absl::StrFormat("%-16s done: %d updates", stage_, made));
    }
    stage_start_ = start;
  }
  stage_ = job.stage();
  cells_ = cells;
  shown_step_ = job.stage_step();
  lines.push_back(Bar(job.stage(), job.stage_step(), steps, job.policy_version()));
  return lines;
}

std::string WarmupCoverage(const v1::LearnerJobConfig& job, int rollouts_per_task, int train_tasks) {
  const v1::StageConfig& warmup = job.recipe().agent_warmup();
  if (warmup.skip() || !warmup.import_job_dir().empty() || train_tasks <= 0) return "";
  const int64_t per_task = std::max(1, rollouts_per_task);
  const int64_t reached = std::min<int64_t>(train_tasks, (warmup.steps() + per_task - 1) / per_task);
  if (reached >= train_tasks) return "";
  return absl::StrFormat(
      "warm-up: %d trajectories, %d a task, reach %d of the %d training tasks; the other %d give RFT and value "
      "pretraining nothing (--job_set=recipe.agent_warmup.steps=%d reaches every one)",
      warmup.steps(), per_task, reached, train_tasks, train_tasks - reached, per_task * train_tasks);
}

std::string LatestPolicyCheckpoint(const std::string& job_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int64_t best = -1;
  std::string out;
  for (const auto& e : fs::directory_iterator(job_dir + "/checkpoints", ec)) {
    const std::string name = e.path().filename().string();
    int64_t n = 0;
    if (name.rfind("step-", 0) == 0 && absl::SimpleAtoi(name.substr(5), &n) && n > best &&
        fs::exists(e.path() / "policy")) {
      best = n;
      out = (e.path() / "policy").string();
    }
  }
  return out;
}

std::string LearnReport(const LearnRun& run) {
  const v1::LearnConfig& o = *run.config;
  const v1::RecipeConfig& r = o.job().recipe();
  std::string out = "\n=== kernelrl learn: report ===\n";
  absl::StrAppendFormat(&out, "job        %s %s after %.0f s (%d updates, policy v%d)\n", run.job.id(),
                        v1::Job::State_Name(run.job.state()), run.seconds, run.job.step(), run.job.policy_version());
  absl::StrAppendFormat(&out, "trained    %s\n           on %d tasks of the task family (%s/train.jsonl), %s sandbox\n",
                        o.base_checkpoint(), run.train_tasks, o.family_dir(), o.backend() == "cpu" ? "CPU" : "CUDA");
  std::string recipe;
  auto stage = [&recipe](const v1::StageConfig& s, const std::string& text) {
    if (!s.skip()) absl::StrAppend(&recipe, recipe.empty() ? "" : " -> ", text);
  };
  stage(r.single_turn_ppo(), absl::StrCat("single-turn PPO ", r.single_turn_ppo().steps()));
  stage(r.agent_warmup(), r.agent_warmup().import_job_dir().empty()
                              ? absl::StrCat("warm-up ", r.agent_warmup().steps(), " ",
                                             PoolForStage(o, "agent_warmup") == "engineer" ? "scripted-engineer" : "model",
                                             " trajectories")
                              : absl::StrCat("warm-up <= ", r.agent_warmup().steps(), " imported from ",
                                             r.agent_warmup().import_job_dir()));
  if (!r.rft().skip()) absl::StrAppend(&recipe, recipe.empty() ? "" : " -> ", "RFT ", r.rft().epochs(), " epochs");
  if (!r.value_pretrain().skip()) {
    absl::StrAppend(&recipe, recipe.empty() ? "" : " -> ", "value pretraining <= ", r.value_pretrain().steps());
  }
  stage(r.agentic_ppo(), absl::StrCat("agentic PPO ", r.agentic_ppo().steps()));
  // The seed fixes the leases' seeds, so the same command on the same inputs takes the same warm-up.
  absl::StrAppend(&out, "recipe     ", recipe, " (", o.ablation(), "), seed ", o.job().seed(), "\n");

  // Columns: the start (the base model; none when the job skipped it), the first evaluation of
  // agentic PPO (the policy the stages before it left) and the last.
  const Json& evals = run.heldout;
  auto label_of = [](const Json& e) {
    const Json* label = FindJson(e, "label");
    return label != nullptr && label->is_string() ? label->get<std::string>() : std::string();
  };
  const Json* before = nullptr;
  const Json* ppo_start = nullptr;
  for (size_t i = 0; i < evals.size(); ++i) {
    const std::string label = label_of(evals[i]);
    if (i == 0 && (label.empty() || label == "start")) before = &evals[i];
    if (ppo_start == nullptr && absl::StartsWith(label, "agentic-")) ppo_start = &evals[i];
  }
  struct Column {
    std::string header;
    const Json* eval;
    const char* meaning;  // What it measures, so the report says which stage taught what.
  };
  std::vector<Column> cols;
  if (before != nullptr) {
    cols.push_back({absl::StrCat("before (v", FigureOf(before, "policy_version"), ")"), before, "before: the base checkpoint"});
  }
  const Json* after = evals.empty() ? nullptr : &evals.back();
  if (ppo_start != nullptr) {
    cols.push_back({absl::StrCat("PPO start (v", FigureOf(ppo_start, "policy_version"), ")"), ppo_start,
                    "PPO start: what the stages before agentic PPO taught it"});
  }
  if (after != nullptr && after != before && after != ppo_start) {
    cols.push_back({absl::StrCat("after (v", FigureOf(after, "policy_version"), ")"), after, "after: the job's last policy"});
  }
  if (!cols.empty()) {
    absl::StrAppendFormat(&out, "held-out   %d tasks never trained on, %d rollouts each (%s)\n",
                          static_cast<int>(FigureOf(cols.front().eval, "n")), std::max(1, o.eval_rollouts()),
                          o.eval_temperature() > 0 ? absl::StrFormat("sampled at temperature %g", o.eval_temperature())
                                                   : std::string("greedy"));
    auto row = [&](const std::string& label, const std::function<std::string(const Json&)>& cell) {
      absl::StrAppendFormat(&out, "             %-28s", label);
      for (const Column& c : cols) absl::StrAppendFormat(&out, " %-18s", cell(*c.eval));
      absl::StrAppend(&out, "\n");
    };
    row("", [&](const Json& e) {
      for (const Column& c : cols) {
        if (c.eval == &e) return c.header;
      }
      return std::string();
    });
    row("reward per rollout", [](const Json& e) {
      const Json& r = PerRolloutFigures(e);
      return absl::StrFormat("%.2f +- %.2f", FigureOf(&r, "reward_mean"), FigureOf(&r, "reward_sem"));
    });
    for (auto [label, key] : {std::pair<const char*, const char*>{"pass rate (per rollout)", "pass_rate"},
                              {"faster than eager", "faster_than_eager_rate"},
                              {"faster than compile", "faster_than_compile_rate"},
                              {"  paid 3 (resolved)", "faster_than_compile_paid_rate"}}) {
      row(label, [key = key](const Json& e) {
        const Json& r = PerRolloutFigures(e);
        return FindJson(r, key) != nullptr ? Pct(FigureOf(&r, key)) : std::string("-");  // older curves
      });
    }
    row("geomean x eager (final)", [](const Json& e) {
      return absl::StrFormat("%.2fx", FigureOf(&PerRolloutFigures(e), "geomean_speedup_vs_eager"));
    });
    row("geomean x compile (final)", [](const Json& e) {
      return absl::StrFormat("%.2fx", FigureOf(&PerRolloutFigures(e), "geomean_speedup_vs_compile"));
    });
    // Rollouts the sandbox could not judge (INFRA_ERROR after their retries): left out of the rows above.
    auto unjudged = [](const Column& c) { return FigureOf(&PerRolloutFigures(*c.eval), "unjudged") > 0; };
    if (std::any_of(cols.begin(), cols.end(), unjudged)) {
      row("unjudged, left out", [](const Json& e) {
        return absl::StrFormat("%d", static_cast<int>(FigureOf(&PerRolloutFigures(e), "unjudged")));
      });
    }
    row("best-of-k > compile", [](const Json& e) { return Pct(FigureOf(&e, "faster_than_compile_rate")); });
    row("best-of-k geomean x compile", [](const Json& e) {
      return absl::StrFormat("%.2fx", FigureOf(&e, "geomean_speedup_vs_compile"));
    });
    std::vector<std::string> meaning;
    for (const Column& c : cols) meaning.push_back(c.meaning);
    absl::StrAppend(&out, "             (", absl::StrJoin(meaning, "; "), ")\n");
    // An evaluation that reached the run's limit scored only the tasks it finished (kernelrl eval's cut).
    for (const Column& c : cols) {
      const std::optional<actor::EvalCut> cut = actor::EvalCutOf(*c.eval);
      if (!cut.has_value()) continue;
      const int scored = static_cast<int>(FigureOf(c.eval, "n"));
      absl::StrAppendFormat(&out, "             %s: cut at the run's limit (%.0f s): %d of %d tasks scored, the rest "
                            "named in curves.json's \"cut\"\n", c.header, cut->wall_limit_s, scored,
                            scored + static_cast<int>(cut->tasks_unfinished.size()));
    }
    if (o.backend() == "cpu") {
      absl::StrAppend(&out, "             (CPU sandbox: no eager / torch.compile baselines, so no speed-ups;\n"
                            "              a correct kernel earns 1, a wrong one -1)\n");
    }
  } else {
    absl::StrAppend(&out, "held-out   no evaluation ran (see learn.log)\n");
  }
  absl::StrAppend(&out, TrainingLines(run.steps, run.audit));
  absl::StrAppend(&out, "curves     ", run.curves_dir, "/reward.png, rates.png, stability.png\n");
  absl::StrAppend(&out, "data       ", run.curves_dir, "/curves.json (every update and evaluation)\n");
  absl::StrAppend(&out, "rollouts   ", run.curves_dir, "/eval-<label>/transcripts/ (every held-out rollout as text)\n");
  absl::StrAppend(&out, "checkpoint ", run.checkpoint.empty() ? "(none committed)" : run.checkpoint, "\n");
  absl::StrAppend(&out, "logs       ", o.paths().run_dir(), "/learn.log and one <process>.log each\n");
  return out;
}

}  // namespace kernelrl::cli
