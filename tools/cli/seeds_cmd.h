// `kernelrl seeds RUN...`: several `kernelrl learn` jobs (seeds, ablations) against a learning
// run's bar (tools/cli/seeds_report.h). A RUN is a job's curves.json, or a directory holding it
// (the job's curves/, or the job directory); a seed continued over several jobs is their RUNs
// joined by '+', in the order they ran.
//   kernelrl seeds RUN... [--min_standard_errors=2] [--min_explained_variance=0.3]   (kernelrl.v1.SeedsConfig)
// Exit codes: 0 reported (whether or not the bar is met), 1 a run unreadable or inconsistent, 2 bad flags.
#ifndef KERNELRL_TOOLS_CLI_SEEDS_CMD_H_
#define KERNELRL_TOOLS_CLI_SEEDS_CMD_H_

namespace kernelrl::cli {

int SeedsMain(int argc, char** argv);

}  // namespace kernelrl::cli

#endif  // KERNELRL_TOOLS_CLI_SEEDS_CMD_H_
