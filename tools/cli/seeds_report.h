// `kernelrl seeds`: several `kernelrl learn` jobs (seeds of the PPO stage, and its ablations) read
// together, from their curves.json, against the bar a learning run must clear: across the seeds, the
// final policy's held-out reward and faster-than-compile rate above the PPO start's (the policy RFT
// and value pretraining left) by more than N standard errors, its geometric-mean speed-up vs
// torch.compile above the start's, the critic's explained variance during PPO above a level, its
// trajectories at least so many model tokens long, and every reward from a CUDA sandbox verdict
// with no hack-flagged verdict paid more than 1.
//
// A seed whose PPO ran over several jobs (device calls continued with CONTINUE_FROM) is one chain:
// its start is the first job's first agentic-PPO evaluation, its final the last job's last; its
// updates and explained variances are all the chain's agentic-PPO updates.
#ifndef KERNELRL_TOOLS_CLI_SEEDS_REPORT_H_
#define KERNELRL_TOOLS_CLI_SEEDS_REPORT_H_

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/json.h"
#include "proto/cli_config.pb.h"

namespace kernelrl::cli {

// One held-out evaluation, per rollout (each rollout's final verdict); geomeans <= 0 when no
// rollout passed (nothing to take a geometric mean of).
struct HeldOutPoint {
  std::string label;
  int64_t policy_version = 0;
  int n = 0;
  double reward_mean = 0, reward_sem = 0, pass_rate = 0, faster_than_eager = 0, faster_than_compile = 0;
  double faster_than_compile_paid = 0;  // Reward 3: resolved above the judge's margin; NaN: not recorded.
  double geomean_vs_compile = 0;
  // Per task, its rollouts' mean reward (curves.json from 2026-11-30 on; empty before).
  std::map<std::string, double> task_rewards;
  std::map<std::string, double> task_faster_than_compile;  // Per task, its rollouts' share faster than compile.
  // Per task, the eager and torch.compile baselines' medians (us) it was judged against
  // (curves.json from 2026-12-01 on; empty before).
  std::map<std::string, std::pair<double, double>> task_baselines;
};

struct SeedFigures {
  std::string name;      // What was read (the chain's files joined by '+').
  std::string ablation;  // "none", "no_rft", "no_value_pretrain", ...
  uint64_t seed = 0;
  bool all_cuda = true;  // Every job of the chain scored by the CUDA sandbox.
  int jobs = 0;
  HeldOutPoint start, final;
  // Where the start is another seed's first job's PPO-start evaluation (this seed's PPO began from
  // that job's PPO-start policy): that job's file; empty where the chain's first job is this seed's.
  std::string start_from;
  std::vector<double> explained_variance;  // One per agentic-PPO update, in order.
  // The same against the paper's targets (V + GAE, lambda 0.95), where the job reported it.
  std::vector<double> explained_variance_gae95;
  std::vector<double> explained_variance_task_means;  // A critic that knows only each task's mean.
  // Pooled over every model token of the agentic-PPO updates (their sums: ev_tokens, ev_target_sum,
  // ...): one figure for the stage, where a batch of near-equal rewards leaves its own ratio of two
  // tiny variances. NaN where the job did not report the sums.
  double explained_variance_pooled = NAN;
  // The agentic-PPO updates' model tokens and trajectories trained, summed (curves.json's step
  // metrics model_tokens and trajectories; 0 trajectories where the job did not report them).
  double ppo_model_tokens = 0;
  int64_t ppo_trajectories = 0;
  // The chain's audits, summed.
  int64_t trajectories = 0, hack_reward_above_1 = 0, flagged_reward_above_1 = 0, verdicts_cached = 0;
  // Links of the chain (a job and the one before it) whose weights were compared: the later job's
  // start_weights against the earlier's final_weights (or, for another seed's start, the weights its
  // PPO-start evaluation scored); the rest predate the record (curves.json before 2026-12-02).
  int links = 0, links_checked = 0;
  // The weights the start and final evaluations scored (their SHA-256 by file; null where not
  // recorded), and the re-scorings put in their place (Rescore), if any.
  Json start_weights, final_weights;
  std::string rescored_start, rescored_final;  // The re-scorings' files, joined by '+' where repeated.
  // Where the start (final) evaluation was cut at its run's limit: what it left unscored ("3 of 12
  // held-out tasks unfinished at the 310 s limit"); empty where it scored every task.
  std::string start_cut, final_cut;
  std::string rescored_how;  // "temperature 0.7, 4 rollouts a task".
  // Where the start (final) is the mean of several re-scorings of its weights: each of them. Their
  // spread is one evaluation's own noise, measured.
  std::vector<HeldOutPoint> start_repeats, final_repeats;

  // No evaluation of the chain scored the last job's final weights (final_weights), and no
  // re-scoring of them has taken the final's place yet.
  bool final_unscored() const { return final.label.empty(); }
};

// A `kernelrl learn --eval_only` run: one evaluation of the weights it names, sampled alike for
// every policy it is compared with.
struct Rescoring {
  std::string path;
  Json weights;
  HeldOutPoint point;
  double temperature = 0;
  int rollouts = 0;
};

// The re-scorings from their curves.json. Errors name the file: not an eval-only run, no weights,
// or runs that were not scored alike (temperature, rollouts a task, held-out tasks): a change
// between two of them would then be partly the scoring's.
absl::StatusOr<std::vector<Rescoring>> RescoringsOf(const std::vector<std::pair<std::string, Json>>& runs);

// The seed's start and final replaced by the re-scorings of the weights they scored; several
// re-scorings of the same weights (repeats) by their mean, figure by figure and task by task. Greedy,
// one rollout a task, a near-tie between two designs decides a task's reward by itself; sampled,
// several rollouts a task with the same random numbers for every policy (kernelrl eval seeds each
// task's rollout k alike), the two policies part only where their odds differ or the sandbox's
// timings, which the policy reads, differ. Errors: a weight that was not recorded, or no re-scoring of it.
absl::Status Rescore(const std::vector<Rescoring>& rescorings, SeedFigures* f);
// An error where no re-scoring took the place of a seed's final that no evaluation scored
// (final_unscored), or of a start or final evaluation cut at its run's limit: that one scored only
// the tasks it finished, those the policy finishes sooner, so its figures are biased and its tasks
// are not the other end's.
absl::Status CheckScored(const SeedFigures& f);

// The figures of one seed from its jobs' curves.json, in the order they ran; where no evaluation
// scored the last job's final weights, final_unscored (a re-scoring of them is its final). Errors
// name the file: no agentic-PPO evaluation (the job stopped before PPO), no evaluation after it and
// no final weights recorded, held-out sets of different sizes, jobs of different ablations or seeds
// in one chain, or a job that did not start from the weights the one before it ended with (where
// both recorded them). One exception: a second job
// of another seed that skipped warm-up and RFT (it went on from the first job's PPO-start policy)
// takes the first job's PPO-start evaluation as its start and nothing else of that job.
// `from_ppo_start` says so of a second job of the same seed number (a new arm's seed 1 from a
// PPO start whose own seed 1 went on from there): only the weights, where recorded, tell the two apart.
absl::StatusOr<SeedFigures> SeedFiguresOf(const std::vector<std::pair<std::string, Json>>& chain,
                                          bool from_ppo_start = false);

// The evaluations' mean, figure by figure and task by task (geomeans: their geometric mean over those
// > 0); its reward_sem that of a mean of independent evaluations.
HeldOutPoint MeanOf(const std::vector<HeldOutPoint>& points);

// The standard error of the seeds' mean change, final - start. Where seeds share one start
// evaluation (the same weights scored once, or its repeats averaged), that evaluation's error is
// common to them and the spread of their changes cannot show it: it is added, for each start shared
// by n_g of the n seeds, as (n_g / n)^2 * s^2 / k_g, with s^2 the larger of the finals' variance across
// the seeds (one evaluation's noise plus the seeds' own spread) and the start's k_g repeats' variance.
// `start_repeats[i]`: seed i's start's repeats (empty: evaluated once); `start_group[i]`: which
// start seed i has.
double ChangeStandardError(const std::vector<double>& start, const std::vector<double>& final,
                           const std::vector<std::vector<double>>& start_repeats, const std::vector<int>& start_group);

// The report, one screen of plain text. Seeds are the chains of ablation "none"; the others are
// listed as ablations, whichever way they went. A "baselines" line says whether every evaluation was
// judged against the same baselines: runs judged against baselines measured apart (another sitting's,
// another protocol's) each measure their own change, and their levels do not pool.
std::string SeedsReport(const std::vector<SeedFigures>& runs, const v1::SeedsConfig& config);

// Two-sided sign test: the chance of a split at least as uneven as `up` against `down` among
// up + down pairs that changed, each way equally likely (1 when none changed).
double SignTestP(int up, int down);

// Mean and standard error of the mean (sample standard deviation / sqrt(n); 0 when n < 2).
std::pair<double, double> MeanAndStandardError(const std::vector<double>& xs);

}  // namespace kernelrl::cli

#endif  // KERNELRL_TOOLS_CLI_SEEDS_REPORT_H_
