// The figures `kernelrl learn` draws its curves from, read back from what the
// services left on disk (no second bookkeeping):
//  * UpdatesFromLedger: every committed update's figures (the ledger's UPDATE
//    records), which polling the job would miss when updates are fast.
//  * TrainedStats: per update step, the verdicts of the trajectories it trained
//    on (the job's ledger.jsonl TRAINED records — ROLLBACKs void later ones —
//    and the trajectory files <job>/trajectories/<hex id>.pb), plus an audit of
//    every trained trajectory's verdict.
//  * HeldOutFromReport: `kernelrl eval`'s report.json as one evaluation point.
//  * WeightsDigest / CheckpointPolicyDir: which weights a job started from and
//    which it scored or ended with, so that jobs joined into one seed's chain
//    can be checked to continue each other (seeds_report.h).
#ifndef KERNELRL_TOOLS_CLI_LEARN_CURVES_H_
#define KERNELRL_TOOLS_CLI_LEARN_CURVES_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/json.h"

namespace kernelrl::cli {

struct VerdictStats {
  int n = 0;
  double reward_sum = 0, reward_sq_sum = 0;
  int passed = 0, faster_eager = 0, faster_compile = 0;
  // Paid as faster than torch.compile (reward 3): the judge resolved the ratio above its margin.
  // faster_compile counts every ratio above 1 (the paper's metric), unresolved ones too.
  int faster_compile_paid = 0;
  // Rollout seconds summed (trained trajectories: wall, waiting for the policy, for the sandbox).
  double wall_s = 0, policy_s = 0, sandbox_s = 0;
  // Trained trajectories by how their rollout ended (TrajectoryStats.stop_reason: "submitted",
  // "max_turns", "parse_errors", ...): a policy that starts breaking its tool calls shows here.
  std::map<std::string, int> stop_reasons;
  // Mean, standard error of the mean, rates (0 when n == 0).
  Json ToJson() const;
};

struct TrainedAudit {
  int trajectories = 0;          // Trained (valid TRAINED records).
  int hack_flagged = 0;          // Final verdict HACK_DETECTED or with any flag the judge raises as a hack.
  int hack_reward_above_1 = 0;   // Of those, reward > 1: must be 0.
  int compile_cache_hits = 0, compiles = 0;  // Compile stages served from the sandbox's content-hash cache.
  // Final verdicts with reward > 1 carrying a flag the judge does not rate informational
  // (SeverityOf, profiler_service/judge.h; all flags seen are listed), and final verdicts served
  // from the sandbox's verdict cache.
  int flagged_reward_above_1 = 0, verdicts_cached = 0;
  std::set<std::string> flags_seen;
  // Warm-up trajectories accepted, and those leased by a scripted-engineer actor ("engineer-*"): the
  // rest were leased by a model actor just before the pools switched, or imported from an earlier
  // job's warm-up (StageConfig.import_job_dir: no lease).
  int warmup_accepted = 0, warmup_from_engineer = 0, warmup_imported = 0;
  // Fresh final verdicts that profiled: their wall, their waits for the sandbox worker's GPU
  // (stages gpu_queue, gpu_lease, start_queue and clock_queue: the learner's lease and the other
  // profiling jobs before them) and the clock's idle settle after the lease (lease_settle),
  // seconds; the JSON gives their medians.
  std::vector<double> profiled_wall_s, profiled_gpu_queue_s, profiled_lease_settle_s;
  Json ToJson() const;
};

// [{"step", "stage", "stage_step", "policy_version", "wall_s", "metrics"}] in step order, from the
// job's ledger.jsonl UPDATE records: the last record of a step wins (a redone update), a ROLLBACK to
// step s voids those of later steps. wall_s: seconds from start_unix_ms to the record.
absl::StatusOr<Json> UpdatesFromLedger(const std::string& job_dir, int64_t start_unix_ms);

// step -> stats of that step's trained trajectories.
absl::StatusOr<std::map<int64_t, VerdictStats>> TrainedStats(const std::string& job_dir, TrainedAudit* audit);

// {"tasks", "pass_rate", "faster_than_eager_rate", "faster_than_compile_rate", "reward_mean",
//  "reward_sem", "geomean_speedup_vs_eager", "geomean_speedup_vs_compile"} over every task of the report
// (its best verdict over rollouts and turns: best-of-k), and "rollouts": the same rates, reward mean and
// s.e.m. over every rollout's final verdict (the policy's reward; tasks x repeats), with the geometric
// means over the final kernels that are correct and profiled. A report cut at its wall-clock limit
// (kernelrl eval's wall_limit_s) gives its "cut" as is ({"wall_limit_s", "tasks_unfinished",
// "rollouts_unfinished"}): the figures are then over its finished tasks alone.
absl::StatusOr<Json> HeldOutFromReport(const std::string& report_json_path);

// {file name: SHA-256 hex} of every model*.safetensors file of a Hugging Face-format directory (what
// `sha256sum model*.safetensors` prints); an error where there is none.
absl::StatusOr<Json> WeightsDigest(const std::string& hf_dir);

// The policy directory of the job's checkpoint whose manifest names `policy_version`: an evaluated
// policy's weights, while the job's retention has kept them (the last: LatestPolicyCheckpoint).
absl::StatusOr<std::string> CheckpointPolicyDir(const std::string& job_dir, int64_t policy_version);

}  // namespace kernelrl::cli

#endif  // KERNELRL_TOOLS_CLI_LEARN_CURVES_H_
