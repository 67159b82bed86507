// design_report: what a run's trajectories did (tools/codemodel/design_report.h).
//
//   design_report --trajectories=DIR --tasks=A.jsonl[,B.jsonl] [--bucket=10] [--per_trajectory]
//                 [--corpus_shapes=BASE/tool_line_shapes.txt]
//
// DIR holds kernelrl.v1.Trajectory files (*.pb: a job's learner-state/jobs/<id>/trajectories);
// the task files (family_gen's train.jsonl, heldout.jsonl) give each task's source and device.
// Prints JSON: counts, mean tool calls / turns / model tokens per source (the model's or the
// scripted engineer's), their failed file calls and revisions (the model's also as a line on
// stderr: how many Profiles after a first one timed another design), and per family the model's final-kernel design histogram per
// policy-version bucket; with --corpus_shapes, per tool how many of its answers' lines have a shape
// the base's corpus never showed (tools/codemodel/tool_lines.h), also as a line on stderr.
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file.h"
#include "google/protobuf/util/json_util.h"
#include "proto/task.pb.h"
#include "tools/codemodel/design_report.h"
#include "tools/codemodel/tool_lines.h"

ABSL_FLAG(std::string, trajectories, "", "directory of Trajectory .pb files");
ABSL_FLAG(std::string, tasks, "", "comma-separated task files (one kernelrl.v1.Task JSON a line)");
ABSL_FLAG(int64_t, bucket, 10, "policy versions per bucket");
ABSL_FLAG(bool, per_trajectory, false, "also list every trajectory's facts");
ABSL_FLAG(std::string, corpus_shapes, "",
          "the base's tool_line_shapes.txt: also count the tool lines whose shape its corpus never showed");

int main(int argc, char** argv) {
  using namespace kernelrl;
  absl::ParseCommandLine(argc, argv);
  std::map<std::string, v1::Task> tasks;
  for (absl::string_view path : absl::StrSplit(absl::GetFlag(FLAGS_tasks), ',', absl::SkipEmpty())) {
    auto text = ReadFileToString(std::string(path));
    if (!text.ok()) {
      std::fprintf(stderr, "design_report: %s\n", text.status().ToString().c_str());
      return 1;
    }
    for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
      v1::Task t;
      if (google::protobuf::util::JsonStringToMessage(std::string(line), &t).ok()) tasks[t.id()] = t;
    }
  }
  std::set<std::string> corpus_shapes;
  const bool count_lines = !absl::GetFlag(FLAGS_corpus_shapes).empty();
  if (count_lines) {
    auto read = codemodel::ReadToolLineShapes(absl::GetFlag(FLAGS_corpus_shapes));
    if (!read.ok()) {
      std::fprintf(stderr, "design_report: %s\n", read.status().ToString().c_str());
      return 1;
    }
    corpus_shapes = *std::move(read);
  }
  std::map<std::string, codemodel::ToolLineCount> tool_lines;
  std::vector<codemodel::TrajectoryFacts> facts;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(absl::GetFlag(FLAGS_trajectories), ec)) {
    if (e.path().extension() != ".pb") continue;
    auto bytes = ReadFileToString(e.path().string());
    v1::Trajectory t;
    if (!bytes.ok() || !t.ParseFromString(*bytes)) {
      std::fprintf(stderr, "design_report: cannot read %s\n", e.path().c_str());
      return 1;
    }
    auto it = tasks.find(t.task_id());
    const std::string source = it == tasks.end() ? "" : it->second.reference_source();
    const std::string device = it != tasks.end() && it->second.inputs().device() == "cpu" ? "cpu" : "cuda";
    facts.push_back(codemodel::Facts(t, source, device));
    if (count_lines) codemodel::CountToolLines(t, corpus_shapes, &tool_lines);
  }
  if (ec) {
    std::fprintf(stderr, "design_report: %s\n", ec.message().c_str());
    return 1;
  }
  Json out = codemodel::Summarise(facts, absl::GetFlag(FLAGS_bucket));
  // Whether the model's revisions changed what was timed (a failed edit times the old design again).
  if (const Json* model = FindJson(*FindJson(out, "by_source"), "model")) {
    std::fprintf(stderr, "revisions: %.0f Profiles after a first one, %.0f of them timing another design; %.0f "
                 "Write/Edit/MultiEdit/Bash calls failed; %.0f of %.0f trajectories passed, then ended on a "
                 "failing kernel\n", JsonNumber(*FindJson(*model, "revisions")),
                 JsonNumber(*FindJson(*model, "revisions_changed_design")),
                 JsonNumber(*FindJson(*model, "failed_file_calls")),
                 JsonNumber(*FindJson(*model, "passed_then_failed")), JsonNumber(*FindJson(*model, "trajectories")));
  }
  if (count_lines) {
    // A tool text the corpus never showed reaches the model first in a rollout: said where it shows.
    out["tool_lines_not_in_corpus"] = codemodel::ToolLineCountsJson(tool_lines, 5);
    std::string line = "tool lines whose shape the corpus never showed:";
    for (const auto& [tool, c] : tool_lines) absl::StrAppend(&line, " ", tool, " ", c.unseen, "/", c.lines);
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  if (absl::GetFlag(FLAGS_per_trajectory)) {
    Json list = Json::array();
    for (const auto& f : facts) {
      list.push_back(Json::object({{"id", Json(f.id)},
                              {"task_id", Json(f.task_id)},
                              {"family", Json(f.family)},
                              {"source", Json(f.source)},
                              {"policy_version", Json(f.policy_version)},
                              {"assistant_turns", Json(f.assistant_turns)},
                              {"tool_calls", Json(f.tool_calls)},
                              {"parse_errors", Json(f.parse_errors)},
                              {"model_tokens", Json(f.model_tokens)},
                              {"reward", Json(f.reward)},
                              {"verdict_reward", Json(f.verdict_reward)},
                              {"outcome", Json(f.outcome)},
                              {"worker", Json(f.worker)},
                              {"speedup_vs_eager", Json(f.speedup_vs_eager)},
                              {"speedup_vs_compile", Json(f.speedup_vs_compile)},
                              {"design", Json(f.design)},
                              {"op_lines", Json(f.op_lines)},
                              {"first_op_lines", Json(f.first_op_lines)},
                              {"failed_file_calls", Json(f.failed_file_calls)},
                              {"profiles", Json(f.profiles)},
                              {"revisions", Json(f.revisions)},
                              {"revisions_changed_design", Json(f.revisions_changed_design)},
                              {"passed_then_failed", Json(f.passed_then_failed)}}));
    }
    out["per_trajectory"] = std::move(list);
  }
  std::printf("%s\n", DumpJson(out, 2).c_str());
  return 0;
}
