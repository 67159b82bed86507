// The tools' answers as a base read them in pre-training, and what a run's
// rollouts showed it that the corpus never did. A line's shape is the line
// with each number set aside ("reward 2" and "reward 1" are one shape,
// "speed-up vs eager 0.296x, vs torch.compile 0.300x" and the same line with
// "(graph-replayed: ...)" after it are two): a verdict text that the sandbox
// writes and the corpus's model of it (DesignEvaluator) does not reaches the
// model first in a rollout, right where it should read it (docs/CODEMODEL.md,
// fifteenth sitting). corpus_gen writes the corpus's shapes beside its
// tokenizer, pretrain copies them into the base, design_report counts a run's
// tool lines against them.
#ifndef KERNELRL_TOOLS_CODEMODEL_TOOL_LINES_H_
#define KERNELRL_TOOLS_CODEMODEL_TOOL_LINES_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/json.h"
#include "proto/trajectory.pb.h"

namespace kernelrl::codemodel {

// The file beside tokenizer.json (corpus dir and base checkpoint): one shape a line, sorted.
inline constexpr char kToolLineShapesFile[] = "tool_line_shapes.txt";

// `line` with every number written "N" ("3" and "0.296" alike; "6.1e-05" reads "Ne-N").
std::string ToolLineShape(absl::string_view line);

// The shapes of every non-empty line of the records' tool messages (CorpusRecord lines).
std::set<std::string> CorpusToolLineShapes(const std::vector<Json>& records);

absl::Status WriteToolLineShapes(const std::set<std::string>& shapes, const std::string& path);
absl::StatusOr<std::set<std::string>> ReadToolLineShapes(const std::string& path);

// A run's tool lines by tool (the TOOL turn's tool_name): how many, how many of a shape the
// corpus never showed, and those shapes with their counts.
struct ToolLineCount {
  int64_t lines = 0, unseen = 0;
  std::map<std::string, int64_t> unseen_shapes;
};
void CountToolLines(const v1::Trajectory& t, const std::set<std::string>& corpus,
                    std::map<std::string, ToolLineCount>* by_tool);
// {tool: {lines, unseen, shapes: the `top` most frequent unseen shapes with their counts}}.
Json ToolLineCountsJson(const std::map<std::string, ToolLineCount>& by_tool, int top);

}  // namespace kernelrl::codemodel

#endif  // KERNELRL_TOOLS_CODEMODEL_TOOL_LINES_H_
