// `kernelrl report DIR`: re-renders an evaluation's Table 1 (report.md, printed)
// and its plots from the per-task results in DIR/report.json (kernelrl eval's
// output). The summary is recomputed from the tasks (actor/eval_report.h), so
// report.md always agrees with the tasks in report.json; an evaluation cut at its
// wall-clock limit keeps the line that says so.
//   kernelrl report DIR [--plot_script=FILE] [--python=PY]   (kernelrl.v1.ReportConfig)
// Exit codes: 0 rendered, 1 report.json unreadable, 2 bad flags.
#ifndef KERNELRL_TOOLS_CLI_REPORT_CMD_H_
#define KERNELRL_TOOLS_CLI_REPORT_CMD_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actor/eval_report.h"
#include "common/json.h"

namespace kernelrl::cli {

int ReportMain(int argc, char** argv);

// The per-task results of a parsed report.json (its cut: actor::EvalCutOf).
absl::StatusOr<std::vector<actor::TaskResult>> ResultsFromReportJson(const Json& root);

}  // namespace kernelrl::cli

#endif  // KERNELRL_TOOLS_CLI_REPORT_CMD_H_
