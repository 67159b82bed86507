// What `kernelrl learn` tells a person: a progress bar per recipe stage while
// the job runs, and at the end a report of what was trained on what, the
// held-out figures before -> after, and where the curves, logs and checkpoint are.
#ifndef KERNELRL_TOOLS_CLI_LEARN_REPORT_H_
#define KERNELRL_TOOLS_CLI_LEARN_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/json.h"
#include "proto/cli_config.pb.h"
#include "proto/learner.pb.h"

namespace kernelrl::cli {

// One bar per stage of the job's recipe: "agent_warmup  [#####.....]  12/24 trajectories".
class StageProgress {
 public:
  explicit StageProgress(const v1::LearnerJobConfig& job) : job_(job) {}
  // The lines to print: the bar when the job entered a stage or its bar grew by a cell (none
  // otherwise), led on entering a stage by the updates the stage before made when its last bar
  // showed fewer (RFT's few updates end between two polls).
  std::vector<std::string> Update(const v1::Job& job);
  // The bar of `stage` at `step` (steps <= 0: no total known, a count only).
  static std::string Bar(const std::string& stage, int64_t step, int64_t steps, int64_t version);

 private:
  int64_t StepsOf(const std::string& stage) const;
  const v1::LearnerJobConfig job_;
  std::string stage_;
  int cells_ = -1;
  int64_t stage_start_ = 0;   // The job's update count when stage_ began.
  int64_t shown_step_ = 0;    // stage_step of stage_'s last bar.
};

struct LearnRun {
  const v1::LearnConfig* config;
  v1::Job job;
  Json heldout;             // The held-out evaluations, in order (curves.json "heldout").
  int train_tasks = 0;      // Lines of family_dir/train.jsonl.
  double seconds = 0;       // The run's wall time.
  std::string curves_dir;   // curves.json and the PNGs.
  std::string checkpoint;   // The last committed policy ("" if none).
  Json steps = Json::array();   // curves.json "steps": the updates, with their trained verdicts.
  Json audit = Json::object();  // curves.json "audit".
};

// The number at `key` of a curves.json object; 0 when the object or the member is absent or not a
// number (an evaluation that passed nothing has no geomean).
double FigureOf(const Json* object, const char* key);

// A held-out evaluation's per-rollout figures (every sampled rollout's final verdict, "rollouts"),
// else its per-task ones (the best of each task's rollouts): what the reports compare.
const Json& PerRolloutFigures(const Json& eval);

// The final report, plain text, one screen.
std::string LearnReport(const LearnRun& run);

// The warm-up the job collects, in groups of `rollouts_per_task` over `train_tasks` tasks: "" when
// it reaches every task (or imports its set, or is skipped), else the line saying how many it
// reaches: the others give RFT and value pretraining nothing (a 24-trajectory warm-up in groups of
// 4 reached 6 of 9 tasks on an H200, none of the GEMM family's).
std::string WarmupCoverage(const v1::LearnerJobConfig& job, int rollouts_per_task, int train_tasks);

// The newest checkpoints/step-N/policy directory under job_dir ("" if none).
std::string LatestPolicyCheckpoint(const std::string& job_dir);

}  // namespace kernelrl::cli

#endif  // KERNELRL_TOOLS_CLI_LEARN_REPORT_H_
