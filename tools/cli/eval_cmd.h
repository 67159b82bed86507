// `kernelrl eval`: runs a policy over a task set and writes the Table-1
// report (actor/eval_report.h) as JSON, Markdown and PNG plots.
#ifndef KERNELRL_TOOLS_CLI_EVAL_CMD_H_
#define KERNELRL_TOOLS_CLI_EVAL_CMD_H_

namespace kernelrl::cli {

// argv[0] = "eval". Config: kernelrl.v1.EvalConfig (--config, --config_text, --set).
int EvalMain(int argc, char** argv);

}  // namespace kernelrl::cli

#endif  // KERNELRL_TOOLS_CLI_EVAL_CMD_H_
