#include "tools/cli/seeds_report.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "actor/eval_report.h"
#include "common/config.h"
#include "learner/rl/gae.h"
#include "proto/learner_config.pb.h"
#include "tools/cli/learn_report.h"

namespace kernelrl::cli {
namespace {

std::string Label(const Json& eval) {
  const Json* l = FindJson(eval, "label");
  return l != nullptr && l->is_string() ? l->get<std::string>() : std::string();
}

HeldOutPoint PointOf(const Json& eval) {
  const Json* r = &PerRolloutFigures(eval);
  HeldOutPoint p;
  p.label = Label(eval);
  p.policy_version = static_cast<int64_t>(FigureOf(&eval, "policy_version"));
  p.n = static_cast<int>(FigureOf(&eval, "n"));
  p.reward_mean = FigureOf(r, "reward_mean");
  p.reward_sem = FigureOf(r, "reward_sem");
  p.pass_rate = FigureOf(r, "pass_rate");
  p.faster_than_eager = FigureOf(r, "faster_than_eager_rate");
  p.faster_than_compile = FigureOf(r, "faster_than_compile_rate");
  p.faster_than_compile_paid =
      FindJson(*r, "faster_than_compile_paid_rate") != nullptr ? FigureOf(r, "faster_than_compile_paid_rate") : NAN;
  p.geomean_vs_compile = FigureOf(r, "geomean_speedup_vs_compile");
  if (const Json* t = FindJson(eval, "task_rewards"); t != nullptr && t->is_object()) {
    for (auto it = t->begin(); it != t->end(); ++it) p.task_rewards[it.key()] = FigureOf(t, it.key().c_str());
  }
  if (const Json* t = FindJson(eval, "task_faster_than_compile"); t != nullptr && t->is_object()) {
    for (auto it = t->begin(); it != t->end(); ++it) {
      p.task_faster_than_compile[it.key()] = FigureOf(t, it.key().c_str());
    }
  }
  if (const Json* t = FindJson(eval, "task_baselines"); t != nullptr && t->is_object()) {
    for (auto it = t->begin(); it != t->end(); ++it) {
      p.task_baselines[it.key()] = {FigureOf(&it.value(), "eager_us"), FigureOf(&it.value(), "compile_us")};
    }
  }
  return p;
}

std::string Title(const SeedFigures& r) {
  return r.ablation == "none" ? absl::StrCat("seed ", r.seed) : absl::StrCat(r.ablation, ", seed ", r.seed);
}

// Whether every evaluation of every run was judged against the same baselines: each task's figures
// against the first run (in order) that evaluated it.
void BaselineLines(const std::vector<SeedFigures>& runs, std::string* out) {
  struct First {
    std::pair<double, double> us;
    std::string run;
  };
  std::map<std::string, First> first;  // task -> the first figures seen
  // "run against run" -> (the tasks whose figures differ, the tasks compared), and one task's figures.
  std::map<std::string, std::pair<std::set<std::string>, std::set<std::string>>> differ;
  std::map<std::string, std::string> example;
  int compared = 0;
  auto same = [](double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b)); };
  for (const SeedFigures& r : runs) {
    for (const HeldOutPoint* p : {&r.start, &r.final}) {
      for (const auto& [task, us] : p->task_baselines) {
        auto [it, added] = first.emplace(task, First{us, Title(r)});
        if (added) continue;
        ++compared;
        const std::string pair = Title(r) + " against " + it->second.run;
        auto& [differing, seen] = differ[pair];
        seen.insert(task);
        if (same(us.first, it->second.us.first) && same(us.second, it->second.us.second)) continue;
        if (differing.empty()) {
          example[pair] = absl::StrFormat("%s: eager %.2f vs %.2f us, torch.compile %.2f vs %.2f us", task, us.first,
                                          it->second.us.first, us.second, it->second.us.second);
        }
        differing.insert(task);
      }
    }
  }
  if (first.empty()) {
    absl::StrAppend(out, "baselines      not recorded (curves.json before 2026-12-01): whether every run was judged "
                         "against the same ones is not known\n");
    return;
  }
  // Runs whose curves.json predates the record: "the same" says nothing about them.
  std::vector<std::string> unrecorded;
  for (const SeedFigures& r : runs) {
    if (r.start.task_baselines.empty() && r.final.task_baselines.empty()) unrecorded.push_back(Title(r));
  }
  const std::string unknown =
      unrecorded.empty() ? ""
                         : absl::StrCat("; not recorded for ", absl::StrJoin(unrecorded, ", "),
                                        " (curves.json before 2026-12-01), whose baselines are not known to be these");
  std::vector<std::string> apart;
  for (const auto& [pair, n] : differ) {
    if (!n.first.empty()) {
      apart.push_back(absl::StrFormat("%s on %d of %d tasks (%s)", pair, n.first.size(), n.second.size(), example[pair]));
    }
  }
  if (apart.empty()) {
    absl::StrAppendFormat(out, "baselines      the same in every evaluation %s(%d tasks, %d comparisons)%s\n",
                          unrecorded.empty() ? "" : "that records them ", first.size(), compared, unknown);
    return;
  }
  absl::StrAppend(out, "baselines      NOT the same: ", absl::StrJoin(apart, "; "),
                  ": each run's change is its own, levels across them do not pool", unknown, "\n");
}

double Median(std::vector<double> xs) {
  if (xs.empty()) return NAN;
  std::sort(xs.begin(), xs.end());
  const size_t m = xs.size() / 2;
  return xs.size() % 2 ? xs[m] : (xs[m - 1] + xs[m]) / 2;
}

std::string Pct(double x) { return absl::StrFormat("%.0f%%", 100 * x); }

std::string Gm(double x) { return x > 0 ? absl::StrFormat("%.2fx", x) : std::string("-"); }
std::string Mark(bool ok) { return ok ? "[yes]" : "[no] "; }

// Which start evaluation each seed has, numbered: the re-scorings that replaced it, else the job whose
// PPO-start evaluation it took, else its own.
std::vector<int> StartGroups(const std::vector<const SeedFigures*>& seeds) {
  std::map<std::string, int> ids;
  std::vector<int> out;
  for (size_t i = 0; i < seeds.size(); ++i) {
    const SeedFigures& r = *seeds[i];
    const std::string key = !r.rescored_start.empty() ? "r" + r.rescored_start
                            : !r.start_from.empty()   ? "f" + r.start_from
                                                      : absl::StrCat("s", i);
    out.push_back(ids.emplace(key, static_cast<int>(ids.size())).first->second);
  }
  return out;
}

bool AnyShared(const std::vector<int>& groups) { return std::set<int>(groups.begin(), groups.end()).size() < groups.size(); }

using PerTask = std::map<std::string, double> HeldOutPoint::*;

// Each task's change in `figure`, final - start, one per seed; false where a seed's evaluations do
// not record the figure per task.
bool ChangesByTask(const std::vector<const SeedFigures*>& seeds, PerTask figure,
                   std::map<std::string, std::vector<double>>* by_task) {
  for (const SeedFigures* r : seeds) {
    const auto &start = r->start.*figure, &final = r->final.*figure;
    if (start.empty() || final.empty()) return false;
    for (const auto& [task, a] : start) {
      auto b = final.find(task);
      if (b != final.end()) (*by_task)[task].push_back(b->second - a);
    }
  }
  return true;
}

// Which held-out tasks moved from the PPO start to the final, pooled over the seeds, with a sign
// test: a gain of several standard errors across seeds can still be one task flipping in each.
// Seeds that share a start evaluation move together wherever its one measurement of a task was off,
// so their seed-task pairs are not independent: the test then counts tasks (each task's change
// averaged over the seeds).
void PerTaskLines(const std::vector<const SeedFigures*>& seeds, bool shared_start, std::string* out) {
  int up = 0, down = 0, pairs = 0;
  std::map<std::string, std::vector<std::string>> moved;  // task -> "seed N a->b"
  for (const SeedFigures* r : seeds) {
    if (r->start.task_rewards.empty() || r->final.task_rewards.empty()) {
      absl::StrAppend(out, "  per task: not in ", r->name, " (curves.json without task_rewards)\n");
      return;
    }
    for (const auto& [task, a] : r->start.task_rewards) {
      auto b = r->final.task_rewards.find(task);
      if (b == r->final.task_rewards.end()) continue;
      ++pairs;
      if (b->second == a) continue;
      (b->second > a ? up : down) += 1;
      moved[task].push_back(absl::StrFormat("seed %d %.2g->%.2g", r->seed, a, b->second));
    }
  }
  if (seeds.empty()) return;
  if (!shared_start) {
    absl::StrAppendFormat(out, "  per task, reward per rollout: %d up, %d down, %d unchanged of %d seed-task pairs; "
                          "sign test p = %.3f\n", up, down, pairs - up - down, pairs, SignTestP(up, down));
  } else {
    std::map<std::string, std::vector<double>> by_task;  // Every seed records task_rewards (above).
    ChangesByTask(seeds, &HeldOutPoint::task_rewards, &by_task);
    int tasks_up = 0, tasks_down = 0;
    for (const auto& [task, changes] : by_task) {
      const double mean = MeanAndStandardError(changes).first;
      if (std::abs(mean) > 1e-9) (mean > 0 ? tasks_up : tasks_down) += 1;
    }
    absl::StrAppendFormat(out, "  per task, reward per rollout: %d up, %d down, %d unchanged of %d seed-task pairs; by task "
                          "(the seeds share a start evaluation): %d up, %d down of %d, sign test p = %.3f\n", up, down,
                          pairs - up - down, pairs, tasks_up, tasks_down, by_task.size(), SignTestP(tasks_up, tasks_down));
  }
  for (const auto& [task, how] : moved) absl::StrAppend(out, "    ", task, ": ", absl::StrJoin(how, ", "), "\n");
}

// Each evaluation re-scored more than once, by its files: the repeats' figures side by side, one
// evaluation's own noise measured (the same weights, the same draws; the sandbox's timings differ).
void RepeatLines(const std::vector<const SeedFigures*>& seeds, std::string* out) {
  std::map<std::string, const std::vector<HeldOutPoint>*> repeated;  // Files -> the repeats.
  for (const SeedFigures* r : seeds) {
    if (!r->start_repeats.empty()) repeated.emplace(r->rescored_start, &r->start_repeats);
    if (!r->final_repeats.empty()) repeated.emplace(r->rescored_final, &r->final_repeats);
  }
  if (repeated.empty()) return;
  absl::StrAppend(out, "repeated re-scorings of one policy (one evaluation's own noise):\n");
  for (const auto& [files, points] : repeated) {
    std::vector<std::string> rewards, compile;
    std::map<std::string, std::pair<double, double>> range;  // Task -> (lowest, highest) mean reward.
    for (const HeldOutPoint& p : *points) {
      rewards.push_back(absl::StrFormat("%.2f", p.reward_mean));
      compile.push_back(Pct(p.faster_than_compile));
      for (const auto& [task, x] : p.task_rewards) {
        auto [it, added] = range.emplace(task, std::pair{x, x});
        it->second = {std::min(it->second.first, x), std::max(it->second.second, x)};
      }
    }
    int differ = 0;
    double widest = 0;
    for (const auto& [task, lo_hi] : range) {
      differ += lo_hi.second > lo_hi.first;
      widest = std::max(widest, lo_hi.second - lo_hi.first);
    }
    absl::StrAppendFormat(out, "  %s: reward per rollout %s; faster than compile %s; tasks' mean rewards apart in %d of %d "
                          "(widest %.2f)\n", files, absl::StrJoin(rewards, ", "), absl::StrJoin(compile, ", "), differ,
                          range.size(), widest);
  }
}

// A figure's change over the held-out tasks: each task's change averaged over the seeds, then the
// mean and standard error of those over the tasks. Greedy evaluations of the same tasks can agree
// in every seed, and then the seeds' standard error is 0 however few tasks moved; this one still
// counts them. {NaN, NaN} where a seed's evaluations do not record the figure per task.
std::pair<double, double> ChangeOverTasks(const std::vector<const SeedFigures*>& seeds, PerTask figure) {
  std::map<std::string, std::vector<double>> by_task;
  if (!ChangesByTask(seeds, figure, &by_task)) return {NAN, NAN};
  std::vector<double> changes;
  for (const auto& [task, d] : by_task) changes.push_back(MeanAndStandardError(d).first);
  if (changes.empty()) return {NAN, NAN};
  return MeanAndStandardError(changes);
}

}  // namespace

double SignTestP(int up, int down) {
  const int n = up + down, k = std::max(up, down);
  if (n == 0) return 1;
  double pmf = std::pow(0.5, n), tail = 0;  // P(X = i) and P(X >= k), X ~ Binomial(n, 1/2)
  for (int i = 0; i <= n; ++i) {
    if (i >= k) tail += pmf;
    pmf = pmf * (n - i) / (i + 1);
  }
  return std::min(1.0, 2 * tail);
}

std::pair<double, double> MeanAndStandardError(const std::vector<double>& xs) {
  if (xs.empty()) return {0, 0};
  double sum = 0;
  for (double x : xs) sum += x;
  const double mean = sum / xs.size();
  if (xs.size() < 2) return {mean, 0};
  double ss = 0;
  for (double x : xs) ss += (x - mean) * (x - mean);
  return {mean, std::sqrt(ss / (xs.size() - 1) / xs.size())};
}

HeldOutPoint MeanOf(const std::vector<HeldOutPoint>& points) {
  if (points.size() == 1) return points.front();
  HeldOutPoint m;
  if (points.empty()) return m;
  m.label = points.front().label;
  m.policy_version = points.front().policy_version;
  m.n = points.front().n;
  m.task_baselines = points.front().task_baselines;
  const double k = static_cast<double>(points.size());
  double sem_sq = 0, log_gm = 0;
  int gm_n = 0;
  std::map<std::string, std::pair<double, int>> rewards, compile;  // Task -> (sum, count).
  for (const HeldOutPoint& p : points) {
    m.reward_mean += p.reward_mean / k;
    m.pass_rate += p.pass_rate / k;
    m.faster_than_eager += p.faster_than_eager / k;
    m.faster_than_compile += p.faster_than_compile / k;
    m.faster_than_compile_paid += p.faster_than_compile_paid / k;  // NaN in any: not recorded.
    sem_sq += p.reward_sem * p.reward_sem;
    if (p.geomean_vs_compile > 0) {
      log_gm += std::log(p.geomean_vs_compile);
      ++gm_n;
    }
    for (auto [from, to] : {std::pair{&p.task_rewards, &rewards}, std::pair{&p.task_faster_than_compile, &compile}}) {
      for (const auto& [task, x] : *from) {
        (*to)[task].first += x;
        (*to)[task].second += 1;
      }
    }
  }
  m.reward_sem = std::sqrt(sem_sq) / k;
  m.geomean_vs_compile = gm_n > 0 ? std::exp(log_gm / gm_n) : 0;
  for (const auto& [task, sum] : rewards) m.task_rewards[task] = sum.first / sum.second;
  for (const auto& [task, sum] : compile) m.task_faster_than_compile[task] = sum.first / sum.second;
  return m;
}

double ChangeStandardError(const std::vector<double>& start, const std::vector<double>& final,
                           const std::vector<std::vector<double>>& start_repeats, const std::vector<int>& start_group) {
  const size_t n = final.size();
  std::vector<double> change;
  for (size_t i = 0; i < n; ++i) change.push_back(final[i] - start[i]);
  double se_sq = std::pow(MeanAndStandardError(change).second, 2);
  const double finals_var = std::pow(MeanAndStandardError(final).second, 2) * n;  // The sample variance.
  std::map<int, std::vector<size_t>> seeds_of;  // Start -> the seeds that have it.
  for (size_t i = 0; i < n; ++i) seeds_of[start_group[i]].push_back(i);
  for (const auto& [group, seeds] : seeds_of) {
    if (seeds.size() < 2) continue;  // A seed's own start: its error is in the changes' spread.
    const std::vector<double>& repeats = start_repeats[seeds.front()];
    double var = finals_var;
    if (repeats.size() >= 2) var = std::max(var, std::pow(MeanAndStandardError(repeats).second, 2) * repeats.size());
    const double share = static_cast<double>(seeds.size()) / n;
    se_sq += share * share * var / std::max<size_t>(1, repeats.size());
  }
  return std::sqrt(se_sq);
}

namespace {

// An evaluation's "cut" (kernelrl eval's wall_limit_s) in words; empty where it has none.
std::string CutOf(const Json& eval) {
  const std::optional<actor::EvalCut> cut = actor::EvalCutOf(eval);
  if (!cut.has_value()) return "";
  const int left = static_cast<int>(cut->tasks_unfinished.size());
  return absl::StrFormat("%d of %d held-out tasks unfinished at the %g s limit", left,
                         left + static_cast<int>(FigureOf(&eval, "n")), cut->wall_limit_s);
}

}  // namespace

absl::StatusOr<SeedFigures> SeedFiguresOf(const std::vector<std::pair<std::string, Json>>& chain,
                                          bool from_ppo_start) {
  if (chain.empty()) return absl::InvalidArgumentError("a seed with no jobs");
  if (from_ppo_start && chain.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(chain[0].first, ": its PPO-start evaluation starts which job? ",
                                                   "(RUN@ppo_start+NEXT)"));
  }
  SeedFigures f;
  std::vector<std::string> names;
  bool started = false;
  // The agentic-PPO updates' explained-variance sums, pooled (tokens, targets, target squares,
  // residuals, residual squares); pooled only where every update reported them.
  double pool[5] = {0, 0, 0, 0, 0};
  bool poolable = true;
  const Json* ppo_start_weights = nullptr;  // What the first job's PPO-start evaluation scored.
  for (size_t j = 0; j < chain.size(); ++j) {
    const auto& [path, curves] = chain[j];
    names.push_back(path);
    auto err = [&path](const std::string& what) { return absl::InvalidArgumentError(absl::StrCat(path, ": ", what)); };
    auto ablation = GetJsonString(curves, "ablation", "none");
    auto backend = GetJsonString(curves, "backend", "");
    auto hp_text = GetJsonString(curves, "hyperparameters_text", "");
    for (const absl::Status& s : {ablation.status(), backend.status(), hp_text.status()}) {
      if (!s.ok()) return err(std::string(s.message()));
    }
    v1::LearnerJobConfig hp;
    if (absl::Status s = MergeTextConfig(*hp_text, "hyperparameters_text", &hp); !s.ok()) {
      return err(std::string(s.message()));
    }
    if (j == 0) {
      f.ablation = *ablation;
      f.seed = hp.seed();
    } else if (j == 1 && *ablation == f.ablation && (from_ppo_start || hp.seed() != f.seed) &&
               hp.recipe().rft().skip() && hp.recipe().agent_warmup().skip()) {
      // Another seed of the PPO stage from the first job's PPO-start policy: of that job only its
      // PPO-start evaluation is this seed's; its updates, audit and final belong to its own seed.
      const HeldOutPoint start = f.start;  // Read from that job above.
      const Json start_weights = f.start_weights;
      f = SeedFigures{};
      f.start_weights = start_weights;
      f.ablation = *ablation;
      f.seed = hp.seed();
      f.start = start;
      f.start_from = chain[0].first;
      names = {chain[0].first + "(PPO start)", path};
      pool[0] = pool[1] = pool[2] = pool[3] = pool[4] = 0;
      poolable = true;
    } else if (j == 1 && from_ppo_start) {
      return err(absl::StrCat("ablation ", *ablation, ", warm-up ", hp.recipe().agent_warmup().skip() ? "skipped" : "run",
                              ", RFT ", hp.recipe().rft().skip() ? "skipped" : "run", ": not a PPO stage from ",
                              chain[0].first, "'s PPO-start policy (ablation ", f.ablation, ")"));
    } else if (*ablation != f.ablation || hp.seed() != f.seed) {
      return err(absl::StrCat("ablation ", *ablation, " seed ", hp.seed(), " continues a chain of ablation ",
                              f.ablation, " seed ", f.seed, ": one seed's jobs only (another seed may follow ",
                              "the first job alone, from its PPO-start policy, skipping warm-up and RFT)"));
    }
    f.all_cuda = f.all_cuda && *backend == "cuda";
    if (j > 0) {  // Did this job start where the one before it ended (or, another seed, where it was scored)?
      const bool from_ppo_start = j == 1 && !f.start_from.empty();
      const Json* from = from_ppo_start ? ppo_start_weights : FindJson(chain[j - 1].second, "final_weights");
      const Json* start = FindJson(curves, "start_weights");
      ++f.links;
      // A PPO start whose evaluation did not record its weights: this job began from them.
      if (from_ppo_start && f.start_weights.is_null() && start != nullptr && start->is_object()) f.start_weights = *start;
      if (from != nullptr && from->is_object() && start != nullptr && start->is_object()) {
        if (*from != *start) {
          return err(absl::StrCat("started from weights ", DumpJson(*start), ", not ",
                                  from_ppo_start ? "the PPO-start policy's of " : "those ", chain[j - 1].first,
                                  from_ppo_start ? ": " : " ended with: ", DumpJson(*from),
                                  " (a chain joins one seed's jobs in the order they ran)"));
        }
        ++f.links_checked;
      }
    }

    const Json* heldout = FindJson(curves, "heldout");
    if (heldout == nullptr || !heldout->is_array()) return err("no \"heldout\" evaluations");
    // The start: the chain's first agentic-PPO evaluation (a continued job's agentic-0 repeats the
    // last job's final). The final: the last job's last evaluation, after that start.
    for (size_t i = 0; i < heldout->size(); ++i) {
      const Json& e = (*heldout)[i];
      if (!started && absl::StartsWith(Label(e), "agentic-")) {
        f.start = PointOf(e);
        f.start_cut = CutOf(e);
        ppo_start_weights = FindJson(e, "weights");
        if (ppo_start_weights != nullptr) f.start_weights = *ppo_start_weights;
        started = true;
        continue;
      }
      if (started && j + 1 == chain.size() && i + 1 == heldout->size()) {
        f.final = PointOf(e);
        f.final_cut = CutOf(e);
        // The final evaluation scores the job's last policy, whose weights the job recorded.
        const Json* w = FindJson(e, "weights");
        if (w == nullptr) w = FindJson(curves, "final_weights");
        f.final_weights = w != nullptr ? *w : Json();
      }
    }
    if (!started) return err("no agentic-PPO evaluation (the job stopped before PPO, or evaluated none)");

    const Json* steps = FindJson(curves, "steps");
    if (steps != nullptr && steps->is_array()) {
      for (const Json& s : *steps) {
        const Json* stage = FindJson(s, "stage");
        const Json* metrics = FindJson(s, "metrics");
        const Json* ev = metrics == nullptr ? nullptr : FindJson(*metrics, "explained_variance");
        if (stage != nullptr && stage->is_string() && stage->get<std::string>() == "agentic_ppo" && ev != nullptr &&
            ev->is_number()) {
          f.explained_variance.push_back(JsonNumber(*ev));
          // Beside it where the job reported them (older curves.json lack them).
          for (auto [key, series] : {std::pair{"explained_variance_gae95", &f.explained_variance_gae95},
                                     std::pair{"explained_variance_task_means", &f.explained_variance_task_means}}) {
            const Json* x = FindJson(*metrics, key);
            if (x != nullptr && x->is_number()) series->push_back(JsonNumber(*x));
          }
          const Json* tokens = FindJson(*metrics, "model_tokens");
          const Json* trained = FindJson(*metrics, "trajectories");
          if (tokens != nullptr && tokens->is_number() && trained != nullptr && trained->is_number()) {
            f.ppo_model_tokens += JsonNumber(*tokens);
            f.ppo_trajectories += static_cast<int64_t>(JsonNumber(*trained));
          }
          int i = 0;
          for (const char* key : {"ev_tokens", "ev_target_sum", "ev_target_sq_sum", "ev_residual_sum",
                                  "ev_residual_sq_sum"}) {
            const Json* x = FindJson(*metrics, key);
            poolable = poolable && x != nullptr && x->is_number();
            if (poolable) pool[i] += JsonNumber(*x);
            ++i;
          }
        }
      }
    }
    const Json* audit = FindJson(curves, "audit");
    f.trajectories += static_cast<int64_t>(FigureOf(audit, "trajectories_trained"));
    f.hack_reward_above_1 += static_cast<int64_t>(FigureOf(audit, "hack_flagged_with_reward_above_1"));
    f.flagged_reward_above_1 += static_cast<int64_t>(FigureOf(audit, "integrity_flagged_with_reward_above_1"));
    f.verdicts_cached += static_cast<int64_t>(FigureOf(audit, "verdicts_from_cache"));
  }
  if (poolable && pool[0] > 0) {  // Over every token of every update, by the trainer's own rule.
    f.explained_variance_pooled = learner::rl::ExplainedVarianceOfSums(pool[0], pool[1], pool[2], pool[3], pool[4]);
  }
  f.jobs = static_cast<int>(chain.size()) - (f.start_from.empty() ? 0 : 1);  // This seed's own jobs.
  f.name = absl::StrJoin(names, "+");
  // The last job's own weights where no evaluation of it scored them (it ran none after its PPO
  // start, or only pauses before its last update: --skip_final_eval): only a re-scoring of those
  // weights stands for the final (CheckScored); an earlier policy's evaluation does not.
  const Json* last = FindJson(chain.back().second, "final_weights");
  const bool last_recorded = last != nullptr && last->is_object() && !last->empty();
  if (last_recorded && (f.final_unscored() || (f.final_weights.is_object() && f.final_weights != *last))) {
    f.final = HeldOutPoint{};
    f.final_cut.clear();
    f.final_weights = *last;
  }
  if (f.final_unscored() && !last_recorded) {
    return absl::InvalidArgumentError(absl::StrCat(chain.back().first, ": no evaluation after the PPO start"));
  }
  // A cut evaluation scored fewer tasks: CheckScored refuses it, after re-scorings had their chance to
  // take its place.
  if (!f.final_unscored() && f.final.n != f.start.n && f.start_cut.empty() && f.final_cut.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(f.name, ": the PPO start was evaluated on ", f.start.n,
                                                   " held-out tasks, the final on ", f.final.n));
  }
  return f;
}

absl::StatusOr<std::vector<Rescoring>> RescoringsOf(const std::vector<std::pair<std::string, Json>>& runs) {
  std::vector<Rescoring> out;
  std::set<std::string> tasks_first;
  std::set<std::string> paths;
  for (const auto& [path, curves] : runs) {
    auto err = [&path = path](const std::string& what) { return absl::InvalidArgumentError(absl::StrCat(path, ": ", what)); };
    if (!paths.insert(path).second) return err("given twice (repeats of one weights' re-scoring are separate runs)");
    const Json* state = FindJson(curves, "state");
    const Json* heldout = FindJson(curves, "heldout");
    if (state == nullptr || !state->is_string() || state->get<std::string>() != "EVAL_ONLY" || heldout == nullptr ||
        !heldout->is_array() || heldout->size() != 1) {
      return err("not a re-scoring (kernelrl learn --eval_only: state EVAL_ONLY, one held-out evaluation)");
    }
    Rescoring r;
    r.path = path;
    const Json& e = (*heldout)[0];
    // Cut at its limit, it scored only the tasks it finished: those the policy finishes sooner, so
    // set against a whole evaluation its figures would be biased, and its tasks are not the others'.
    if (const std::optional<actor::EvalCut> cut = actor::EvalCutOf(e); cut.has_value()) {
      return err(absl::StrFormat(
          "cut at its %g s limit with %d held-out tasks unfinished: a partial re-scoring would bias the paired "
          "comparison (re-score with a longer --job_timeout_s)",
          cut->wall_limit_s, static_cast<int>(cut->tasks_unfinished.size())));
    }
    const Json* w = FindJson(e, "weights");
    if (w == nullptr || !w->is_object() || w->empty()) return err("its evaluation names no weights");
    r.weights = *w;
    r.point = PointOf(e);
    r.temperature = FigureOf(&curves, "eval_temperature");
    r.rollouts = static_cast<int>(FigureOf(&curves, "eval_rollouts"));
    std::set<std::string> tasks;
    for (const auto& [task, reward] : r.point.task_rewards) tasks.insert(task);
    if (tasks.empty()) return err("its evaluation has no per-task rewards");
    if (!out.empty()) {
      const Rescoring& a = out.front();
      if (r.temperature != a.temperature || r.rollouts != a.rollouts || tasks != tasks_first) {
        return err(absl::StrFormat("scored at temperature %g, %d rollouts a task, on %d tasks; %s at %g, %d, on %d "
                                   "(re-scorings compare only when scored alike)", r.temperature, r.rollouts,
                                   tasks.size(), a.path, a.temperature, a.rollouts, tasks_first.size()));
      }
    } else {
      tasks_first = tasks;
    }
    out.push_back(std::move(r));
  }
  return out;
}

absl::Status Rescore(const std::vector<Rescoring>& rescorings, SeedFigures* f) {
  for (auto [what, weights, point, from, repeats] :
       {std::tuple{"start", &f->start_weights, &f->start, &f->rescored_start, &f->start_repeats},
        std::tuple{"final", &f->final_weights, &f->final, &f->rescored_final, &f->final_repeats}}) {
    if (weights->is_null()) {
      return absl::FailedPreconditionError(absl::StrCat(f->name, ": the weights its ", what,
                                                        " evaluation scored were not recorded; it cannot be re-scored"));
    }
    std::vector<HeldOutPoint> points;
    std::vector<std::string> paths;
    for (const Rescoring& r : rescorings) {
      if (r.weights != *weights) continue;
      points.push_back(r.point);
      paths.push_back(r.path);
    }
    if (points.empty()) {
      return absl::NotFoundError(absl::StrCat(f->name, ": no re-scoring of its ", what, "'s weights ", DumpJson(*weights)));
    }
    *point = MeanOf(points);
    *from = absl::StrJoin(paths, "+");
    *repeats = points.size() > 1 ? points : std::vector<HeldOutPoint>();
  }
  const Rescoring& any = rescorings.front();  // RescoringsOf: all scored alike.
  f->rescored_how =
      absl::StrFormat("temperature %g, %d rollout%s a task", any.temperature, any.rollouts, any.rollouts == 1 ? "" : "s");
  return absl::OkStatus();
}

absl::Status CheckScored(const SeedFigures& f) {
  if (f.final_unscored()) {
    return absl::FailedPreconditionError(absl::StrCat(
        f.name, ": no evaluation after the PPO start scored its final weights ", DumpJson(f.final_weights),
        " (its last job evaluated none of them): re-score them (kernelrl learn --eval_only), then --rescored"));
  }
  for (auto [what, cut, rescored] : {std::tuple{"start", &f.start_cut, &f.rescored_start},
                                     std::tuple{"final", &f.final_cut, &f.rescored_final}}) {
    if (!cut->empty() && rescored->empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          f.name, ": its ", what, " evaluation was cut (", *cut,
          "): scored on the tasks the policy finished sooner, it would bias the comparison (re-score those weights "
          "whole: kernelrl learn --eval_only, then --rescored)"));
    }
  }
  return absl::OkStatus();
}

std::string SeedsReport(const std::vector<SeedFigures>& runs, const v1::SeedsConfig& config) {
  std::vector<const SeedFigures*> seeds, ablations;
  for (const SeedFigures& r : runs) (r.ablation == "none" ? seeds : ablations).push_back(&r);
  std::string out = absl::StrFormat("\n=== kernelrl seeds: %d seeds of agentic PPO, %d ablations ===\n", seeds.size(),
                                    ablations.size());
  absl::StrAppendFormat(&out, "%-22s %4s  %-27s %-11s %-11s %-11s %-15s %s\n", "", "PPO", "held-out reward", "pass",
                        "> eager", "> compile", "geomean", "critic EV");
  absl::StrAppendFormat(&out, "%-22s %4s  %-27s %-11s %-11s %-11s %-15s %s\n", "run", "upd.", "start -> final",
                        "start->fin.", "start->fin.", "start->fin.", "x compile", "median (max) pooled");
  auto line = [&out](const SeedFigures& r, const std::string& title) {
    const double max_ev =
        r.explained_variance.empty() ? NAN : *std::max_element(r.explained_variance.begin(), r.explained_variance.end());
    absl::StrAppendFormat(
        &out, "%-22s %4d  %-27s %-11s %-11s %-11s %-15s %.2f (%.2f) %s\n", title, r.explained_variance.size(),
        absl::StrFormat("%.2f+-%.2f -> %.2f+-%.2f", r.start.reward_mean, r.start.reward_sem, r.final.reward_mean,
                        r.final.reward_sem),
        Pct(r.start.pass_rate) + "->" + Pct(r.final.pass_rate),
        Pct(r.start.faster_than_eager) + "->" + Pct(r.final.faster_than_eager),
        Pct(r.start.faster_than_compile) + "->" + Pct(r.final.faster_than_compile),
        Gm(r.start.geomean_vs_compile) + "->" + Gm(r.final.geomean_vs_compile), Median(r.explained_variance), max_ev,
        std::isnan(r.explained_variance_pooled) ? std::string("-")
                                                : absl::StrFormat("%.2f", r.explained_variance_pooled));
  };
  for (const SeedFigures* r : seeds) line(*r, Title(*r) + (r->jobs > 1 ? absl::StrCat(" (", r->jobs, " jobs)") : ""));
  for (const SeedFigures* r : ablations) line(*r, Title(*r));
  int links = 0, checked = 0;
  for (const SeedFigures& r : runs) {
    absl::StrAppend(&out, "  ", r.ablation == "none" ? "seed " : r.ablation + " ", r.seed, ": ", r.name, "\n");
    if (!r.rescored_start.empty()) {
      absl::StrAppend(&out, "    re-scored: start ", r.rescored_start, ", final ", r.rescored_final, "\n");
    }
    links += r.links;
    checked += r.links_checked;
  }
  if (links > 0) {
    absl::StrAppendFormat(&out, "  chains: %d of %d links checked by their weights' SHA-256 (each job started where the "
                          "one before it ended)%s\n", checked, links,
                          checked < links ? "; the rest not recorded (curves.json before 2026-12-02)" : "");
  }

  const double k = config.min_standard_errors();
  const std::vector<int> start_groups = StartGroups(seeds);
  auto change = [&](const std::string& label, const std::function<double(const HeldOutPoint&)>& of, bool pct) {
    std::vector<double> start, final, d;
    std::vector<std::vector<double>> repeats;
    for (const SeedFigures* r : seeds) {
      start.push_back(of(r->start));
      final.push_back(of(r->final));
      d.push_back(final.back() - start.back());
      repeats.emplace_back();
      for (const HeldOutPoint& p : r->start_repeats) repeats.back().push_back(of(p));
    }
    const double mean = MeanAndStandardError(d).first;
    const double se = ChangeStandardError(start, final, repeats, start_groups);
    const double scale = pct ? 100 : 1;
    absl::StrAppendFormat(&out, "  %-24s %+.2f%s +- %.2f%s", label, scale * mean, pct ? "%" : "", scale * se, pct ? "%" : "");
    if (se > 1e-9 * std::abs(mean)) absl::StrAppendFormat(&out, "  (%.1f standard errors)", mean / se);
    absl::StrAppend(&out, "\n");
    return seeds.size() >= 2 && mean > 0 && mean > k * se;
  };
  if (!seeds.empty() && !seeds.front()->rescored_how.empty()) {
    absl::StrAppend(&out, "start and final re-scored (kernelrl learn --eval_only), ", seeds.front()->rescored_how,
                    ", each task's rollout k drawing the same random numbers for every policy\n");
  }
  RepeatLines(seeds, &out);
  absl::StrAppend(&out, "across the ", seeds.size(), " seeds, final - PPO start (mean +- standard error of the mean):\n");
  if (AnyShared(start_groups)) {
    absl::StrAppend(&out, "  (seeds share a start evaluation: its error, common to them, is added to their changes' "
                          "spread, as the larger of the finals' variance across the seeds and its repeats')\n");
  }
  // The same change over the tasks (each task's, averaged over the seeds): true when above k of its
  // standard errors; not recorded per task fails.
  auto over_tasks = [&](PerTask figure, const char* field, bool pct) {
    const auto [mean, se] = ChangeOverTasks(seeds, figure);
    if (std::isnan(mean)) {
      absl::StrAppendFormat(&out, "    %-22s not recorded in every seed (curves.json without %s)\n", "over the tasks",
                            field);
      return false;
    }
    const double scale = pct ? 100 : 1;
    absl::StrAppendFormat(&out, "    %-22s %+.2f%s +- %.2f%s", "over the tasks", scale * mean, pct ? "%" : "", scale * se,
                          pct ? "%" : "");
    if (se > 0) absl::StrAppendFormat(&out, "  (%.1f standard errors)", mean / se);
    absl::StrAppend(&out, "  (each task's change averaged over the seeds)\n");
    return mean > 0 && mean > k * se;
  };
  const bool reward_seeds_ok = change("reward per rollout", [](const HeldOutPoint& p) { return p.reward_mean; }, false);
  const bool reward_ok = over_tasks(&HeldOutPoint::task_rewards, "task_rewards", false) && reward_seeds_ok;
  const bool compile_seeds_ok =
      change("faster than compile", [](const HeldOutPoint& p) { return p.faster_than_compile; }, true);
  const bool compile_ok =
      over_tasks(&HeldOutPoint::task_faster_than_compile, "task_faster_than_compile", true) && compile_seeds_ok;
  const bool paid_known = std::all_of(seeds.begin(), seeds.end(), [](const SeedFigures* r) {
    return !std::isnan(r->start.faster_than_compile_paid) && !std::isnan(r->final.faster_than_compile_paid);
  });
  if (paid_known) {
    change("  paid 3 (resolved)", [](const HeldOutPoint& p) { return p.faster_than_compile_paid; }, true);
  } else {
    absl::StrAppendFormat(&out, "  %-24s not recorded in every seed (curves.json before 2026-12-01)\n",
                          "  paid 3 (resolved)");
  }
  change("faster than eager", [](const HeldOutPoint& p) { return p.faster_than_eager; }, true);
  change("pass rate", [](const HeldOutPoint& p) { return p.pass_rate; }, true);
  // Each seed's geometric mean over the tasks its policy passed; a seed that passed none has none,
  // and then the final cannot be said to be above the start.
  std::vector<double> gm_start, gm_final;
  for (const SeedFigures* r : seeds) {
    if (r->start.geomean_vs_compile > 0) gm_start.push_back(r->start.geomean_vs_compile);
    if (r->final.geomean_vs_compile > 0) gm_final.push_back(r->final.geomean_vs_compile);
  }
  const double gs = MeanAndStandardError(gm_start).first, gf = MeanAndStandardError(gm_final).first;
  absl::StrAppendFormat(&out, "  %-24s %s -> %s  (the seeds' mean; %d of %d passed a task at the end)\n",
                        "geomean x compile", Gm(gs), Gm(gf), gm_final.size(), seeds.size());
  const bool geomean_ok = !seeds.empty() && gm_final.size() == seeds.size() && gf > gs;
  PerTaskLines(seeds, AnyShared(start_groups), &out);

  int min_tasks = seeds.empty() ? 0 : seeds.front()->start.n;
  bool ev_ok = !seeds.empty(), cuda = true;
  int64_t trajectories = 0, hack = 0, flagged = 0, cached = 0;
  std::vector<std::string> medians;
  for (const SeedFigures* r : seeds) {
    min_tasks = std::min(min_tasks, r->start.n);
    const double m = Median(r->explained_variance);
    ev_ok = ev_ok && m > config.min_explained_variance();  // NaN (no PPO update) fails.
    medians.push_back(absl::StrFormat("%.2f", m));
  }
  for (const SeedFigures& r : runs) {
    cuda = cuda && r.all_cuda;
    trajectories += r.trajectories;
    hack += r.hack_reward_above_1;
    flagged += r.flagged_reward_above_1;
    cached += r.verdicts_cached;
  }
  absl::StrAppendFormat(&out, "the bar (%g standard errors, explained variance %g):\n", k, config.min_explained_variance());
  absl::StrAppendFormat(&out, "  %s >= %d seeds, each on >= %d held-out tasks (%d seeds, >= %d tasks)\n",
                        Mark(static_cast<int>(seeds.size()) >= config.min_seeds() && min_tasks >= config.min_heldout_tasks()),
                        config.min_seeds(), config.min_heldout_tasks(), seeds.size(), min_tasks);
  absl::StrAppendFormat(&out, "  %s held-out reward: final above PPO start by > %g standard errors, across the seeds "
                        "and over the tasks\n", Mark(reward_ok), k);
  absl::StrAppendFormat(&out, "  %s faster-than-compile rate: final above PPO start by > %g standard errors, across the "
                        "seeds and over the tasks\n", Mark(compile_ok), k);
  absl::StrAppendFormat(&out, "  %s geomean x compile of each task's final kernel: final above PPO start\n", Mark(geomean_ok));
  absl::StrAppendFormat(&out, "  %s critic explained variance > %g during PPO (each seed's median: %s)\n", Mark(ev_ok),
                        config.min_explained_variance(), absl::StrJoin(medians, ", "));
  auto medians_of = [&](std::vector<double> SeedFigures::*series) {
    std::vector<std::string> out;
    for (const SeedFigures* r : seeds) {
      if (!(r->*series).empty()) out.push_back(absl::StrFormat("%.2f", Median(r->*series)));
    }
    return out;
  };
  const std::vector<std::string> medians95 = medians_of(&SeedFigures::explained_variance_gae95);
  const std::vector<std::string> task_means = medians_of(&SeedFigures::explained_variance_task_means);
  if (!medians95.empty()) {  // For comparison with the paper's curve only: an uninformed critic reads high on it.
    absl::StrAppendFormat(&out, "        (against the paper's targets V + GAE(lambda 0.95), not the bar: medians %s)\n",
                          absl::StrJoin(medians95, ", "));
  }
  std::vector<std::string> pooled;
  for (const SeedFigures* r : seeds) {
    if (!std::isnan(r->explained_variance_pooled)) pooled.push_back(absl::StrFormat("%.2f", r->explained_variance_pooled));
  }
  if (!pooled.empty()) {  // One figure over the stage's tokens, where a batch's own can be a ratio of tiny variances.
    absl::StrAppendFormat(&out, "        (pooled over each seed's PPO tokens, not the bar: %s)\n", absl::StrJoin(pooled, ", "));
  }
  if (!task_means.empty()) {  // Beyond it a critic must tell, within a task, the rollouts that will pay.
    absl::StrAppendFormat(&out, "        (a critic that knew each task's mean reward in the batch: medians %s)\n",
                          absl::StrJoin(task_means, ", "));
  }
  bool tokens_ok = !seeds.empty();
  std::vector<std::string> tokens;
  for (const SeedFigures* r : seeds) {
    const bool known = r->ppo_trajectories > 0;
    const double mean = known ? r->ppo_model_tokens / static_cast<double>(r->ppo_trajectories) : 0;
    tokens_ok = tokens_ok && known && mean >= config.min_model_tokens();
    tokens.push_back(known ? absl::StrFormat("%.0f", mean) : std::string("not recorded"));
  }
  absl::StrAppendFormat(&out, "  %s >= %d model tokens a PPO trajectory (each seed's mean over the trajectories it trained: %s)\n",
                        Mark(tokens_ok), config.min_model_tokens(), absl::StrJoin(tokens, ", "));
  absl::StrAppendFormat(&out, "  %s every reward from a CUDA sandbox verdict (every job's backend)\n", Mark(cuda));
  absl::StrAppendFormat(&out, "  %s no hack-flagged verdict paid more than 1 (%d; flagged above informational: %d)\n",
                        Mark(hack == 0 && flagged == 0), hack, flagged);
  absl::StrAppendFormat(&out, "verdict cache  %s of %d trained trajectories' final verdicts (every run)\n",
                        trajectories > 0 ? Pct(static_cast<double>(cached) / trajectories) : std::string("-"), trajectories);
  BaselineLines(runs, &out);
  return out;
}

}  // namespace kernelrl::cli
