#include "sandbox/diagnostics.h"

#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace kernelrl::sandbox {
namespace {

std::string Relative(std::string file, const std::string& ws) {
  if (!ws.empty() && absl::StartsWith(file, ws + "/")) return file.substr(ws.size() + 1);
  return file;
}

}  // namespace

std::vector<CompileDiagnostic> ParseDiagnostics(const std::string& output, const std::string& workspace_dir,
                                                int max_diagnostics, int max_message_chars) {
  // g++ / nvcc host side:   file:line:col: error: message
  static const std::regex kGcc(R"(^(.+?):(\d+):(\d+):\s+(fatal error|error|warning|note):\s+(.*)$)");
  // cudafe (device front end):   file(line): error #20: message
  static const std::regex kCudafe(R"(^(.+?)\((\d+)\):\s+(error|warning|remark)(?:\s+#[\w-]+)?:\s+(.*)$)");
  // ptxas / nvlink / ld
  static const std::regex kTool(R"(^(ptxas|nvlink|ld|/usr/bin/ld|collect2)[^:]*:?\s*(fatal|error|warning)?[^:]*:\s+(.*)$)");
  std::vector<CompileDiagnostic> out;
  for (absl::string_view line_view : absl::StrSplit(output, '\n')) {
    if (static_cast<int>(out.size()) >= max_diagnostics) break;
    std::string line(line_view.substr(0, 4000));
    std::smatch m;
    CompileDiagnostic d;
    if (std::regex_match(line, m, kGcc)) {
      d.set_file(Relative(m[1], workspace_dir));
      d.set_line(std::stoi(m[2]));
      d.set_column(std::stoi(m[3]));
      d.set_severity(m[4] == "fatal error" ? "error" : std::string(m[4]));
      d.set_message(m[5]);
    } else if (std::regex_match(line, m, kCudafe)) {
      d.set_file(Relative(m[1], workspace_dir));
      d.set_line(std::stoi(m[2]));
      d.set_severity(m[3] == "remark" ? "note" : std::string(m[3]));
      d.set_message(m[4]);
    } else if (absl::StrContains(line, "undefined reference") || std::regex_match(line, m, kTool)) {
      d.set_severity(absl::StrContains(line, "warning") ? "warning" : "error");
      d.set_message(line);
    } else {
      continue;
    }
    if (static_cast<int>(d.message().size()) > max_message_chars) {
      d.set_message(d.message().substr(0, max_message_chars) + "...");
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace kernelrl::sandbox
