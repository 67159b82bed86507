// LearnerJobConfig (proto/learner_config.proto): the defaults, in one place,
// and the checks a job spec must pass before it is accepted.
#ifndef KERNELRL_LEARNER_RL_JOB_CONFIG_H_
#define KERNELRL_LEARNER_RL_JOB_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/learner.pb.h"
#include "proto/learner_config.pb.h"
#include "proto/task.pb.h"

namespace kernelrl::learner::rl {

// The paper's settings (CUDA Agent §3.3, §4.1) and ours where it is silent.
extern const char kJobConfigDefaults[];

// Defaults, then `text` merged over them, then range checks. Errors are
// InvalidArgument naming the field ("spec.hyperparameters_text: ppo.clip_low ...").
absl::StatusOr<v1::LearnerJobConfig> ParseJobConfig(const std::string& text);

// Checks a JobSpec (paths exist, numbers in range, hyper-parameters parse);
// InvalidArgument naming the field.
absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// A task set: one JSON object per line (protobuf JSON; blank lines and lines
// starting with '#' skipped), each a kernelrl.v1.Task (family_gen) or a
// kernelrl.v1.DatasetRecord (data_synth's dataset.jsonl: its task, with the
// record's operators and baselines in metadata "dataset.*", data/dataset.h).
absl::StatusOr<std::vector<v1::Task>> LoadTaskSet(const std::string& path);

}  // namespace kernelrl::learner::rl

#endif  // KERNELRL_LEARNER_RL_JOB_CONFIG_H_
