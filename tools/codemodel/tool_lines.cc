#include "tools/codemodel/tool_lines.h"

#include <algorithm>
#include <regex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file.h"

namespace kernelrl::codemodel {

std::string ToolLineShape(absl::string_view line) {
  static const std::regex number("[0-9]+(\\.[0-9]+)?");
  return std::regex_replace(std::string(line), number, "N");
}

std::set<std::string> CorpusToolLineShapes(const std::vector<Json>& records) {
  std::set<std::string> out;
  for (const Json& r : records) {
    const Json* messages = FindJson(r, "messages");
    if (messages == nullptr || !messages->is_array()) continue;
    for (const Json& m : *messages) {
      const Json* role = FindJson(m, "role");
      const Json* content = FindJson(m, "content");
      if (role == nullptr || content == nullptr || *role != "tool" || !content->is_string()) continue;
      for (absl::string_view line : absl::StrSplit(content->get<std::string>(), '\n', absl::SkipEmpty())) {
        out.insert(ToolLineShape(line));
      }
    }
  }
  return out;
}

absl::Status WriteToolLineShapes(const std::set<std::string>& shapes, const std::string& path) {
  std::string text;
  for (const std::string& s : shapes) absl::StrAppend(&text, s, "\n");  // A shape has no newline.
  return WriteFileAtomically(path, text);
}

absl::StatusOr<std::set<std::string>> ReadToolLineShapes(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  std::set<std::string> out;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) out.emplace(line);
  return out;
}

void CountToolLines(const v1::Trajectory& t, const std::set<std::string>& corpus,
                    std::map<std::string, ToolLineCount>* by_tool) {
  for (const v1::Turn& turn : t.turns()) {
    if (turn.role() != v1::Turn::TOOL) continue;
    ToolLineCount& c = (*by_tool)[turn.tool_name().empty() ? "tool" : turn.tool_name()];
    for (absl::string_view line : absl::StrSplit(turn.content(), '\n', absl::SkipEmpty())) {
      ++c.lines;
      std::string shape = ToolLineShape(line);
      if (corpus.count(shape) == 0) {
        ++c.unseen;
        ++c.unseen_shapes[std::move(shape)];
      }
    }
  }
}

Json ToolLineCountsJson(const std::map<std::string, ToolLineCount>& by_tool, int top) {
  Json out = Json::object();
  for (const auto& [tool, c] : by_tool) {
    std::vector<std::pair<int64_t, std::string>> ranked;
    for (const auto& [shape, n] : c.unseen_shapes) ranked.emplace_back(-n, shape);
    std::sort(ranked.begin(), ranked.end());
    Json shapes = Json::array();
    for (size_t i = 0; i < ranked.size() && static_cast<int>(i) < top; ++i) {
      shapes.push_back(Json::object({{"shape", Json(ranked[i].second)}, {"count", Json(-ranked[i].first)}}));
    }
    out[tool] = Json::object({{"lines", Json(c.lines)}, {"unseen", Json(c.unseen)}, {"shapes", std::move(shapes)}});
  }
  return out;
}

}  // namespace kernelrl::codemodel
