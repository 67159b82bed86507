// `kernelrl plan`: prints the per-GPU memory of an actor + critic training
// job (learner/dist/memory_plan.h) and whether it fits.
#ifndef KERNELRL_TOOLS_CLI_PLAN_CMD_H_
#define KERNELRL_TOOLS_CLI_PLAN_CMD_H_

namespace kernelrl::cli {

// argv[0] = "plan". Config: kernelrl.v1.PlanConfig (--config, --config_text,
// --set). Exit 0: fits; 1: does not fit; 2: bad configuration.
int PlanMain(int argc, char** argv);

}  // namespace kernelrl::cli

#endif  // KERNELRL_TOOLS_CLI_PLAN_CMD_H_
