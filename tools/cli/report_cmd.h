// `kernelrl report DIR`: re-renders an evaluation's Table 1 (report.md, printed)
// and its plots from the per-task results in DIR/report.json (kernelrl eval's
// output). The summary is recomputed from the tasks (actor/eval_report.h), so
// report.md always agrees with the tasks in report.json; an evaluation cut at its
// wall-clock limit keeps the line that says so.
//   kernelrl report DIR [--plot_script=FILE] [--python=PY]   (kernelrl.v1.ReportConfig)
// Exit codes: 0 rendered, 1 report.json unreadable, 2 bad flags.
#ifndef KERNELRL_TOOLS_CLI_REPORT_CMD_H_
#define KERNELRL_TOOLS_CLI_REPORT_CMD_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actor/eval_report.h"

namespace kernelrl::cli {

int ReportMain(int argc, char** argv);

// The per-task results of a report.json.
absl::StatusOr<std::vector<actor::TaskResult>> ResultsFromReportJson(const std::string& text);
// Its "cut", where the evaluation stopped at its wall-clock limit (nullopt: no "cut" key).
absl::StatusOr<std::optional<actor::EvalCut>> CutFromReportJson(const std::string& text);

}  // namespace kernelrl::cli

#endif  // KERNELRL_TOOLS_CLI_REPORT_CMD_H_
