// The trainer's options from a job's LearnerJobConfig (proto/learner_config.proto):
// the one place that maps the job's fields onto TrainerOptions.
#ifndef KERNELRL_LEARNER_RL_TRAINER_OPTIONS_H_
#define KERNELRL_LEARNER_RL_TRAINER_OPTIONS_H_

#include "learner/rl/trainer.h"
#include "proto/learner_config.pb.h"

namespace kernelrl::learner::rl {

AdamWParams AdamWFromConfig(const v1::OptimizerConfig& o);
TrainerOptions TrainerOptionsFromConfig(const v1::LearnerJobConfig& config);

}  // namespace kernelrl::learner::rl

#endif  // KERNELRL_LEARNER_RL_TRAINER_OPTIONS_H_
