// `kernelrl job`: the Learner's job API from the command line.
//
//   kernelrl job submit --base_checkpoint=DIR --task_set=FILE [--name=N] [--max_steps=N]
//                       [--rollouts_per_task=N] [--hyperparameters=FILE.textproto]
//                       [--set=ppo.clip_high=0.3 ...]       prints the Job
//   kernelrl job get JOB_ID                                 prints the Job
//   kernelrl job watch JOB_ID                               one line per change until it ends
//   kernelrl job cancel JOB_ID [--reason=TEXT]
//   kernelrl job list [--page_size=N]
//   common: --learner=HOST:PORT (default 127.0.0.1:50051)
//
// Hyper-parameters are LearnerJobConfig text (proto/learner_config.proto);
// --set overrides fields of it by dotted path, the same syntax as every
// binary's --set. Exit codes: 0 ok (watch: the job SUCCEEDED), 1 RPC error or
// the watched job did not succeed, 2 bad flags.
#ifndef KERNELRL_TOOLS_CLI_JOB_CMD_H_
#define KERNELRL_TOOLS_CLI_JOB_CMD_H_

namespace kernelrl::cli {

// argv[0] is "job"; the subcommand and its flags follow.
int JobMain(int argc, char** argv);

}  // namespace kernelrl::cli

#endif  // KERNELRL_TOOLS_CLI_JOB_CMD_H_
