// `kernelrl report DIR`: re-renders an evaluation's Table 1 (report.md, printed)
// and its plots from the per-task results in DIR/report.json (kernelrl eval's
// output). The summary is recomputed from the tasks (actor/eval_report.h), so
// report.md always agrees with the tasks in report.json.
//   kernelrl report DIR [--plot_script=FILE] [--python=PY]   (kernelrl.v1.ReportConfig)
// Exit codes: 0 rendered, 1 report.json unreadable, 2 bad flags.
#ifndef KERNELRL_TOOLS_CLI_REPORT_CMD_H_
#define KERNELRL_TOOLS_CLI_REPORT_CMD_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actor/eval_report.h"

namespace kernelrl::cli {

int ReportMain(int argc, char** argv);

// The per-task results of a report.json.
absl::StatusOr<std::vector<actor::TaskResult>> ResultsFromReportJson(const std::string& text);

}  // namespace kernelrl::cli

#endif  // KERNELRL_TOOLS_CLI_REPORT_CMD_H_
