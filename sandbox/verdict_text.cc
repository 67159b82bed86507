#include "sandbox/verdict_text.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kernelrl::sandbox {

const std::vector<std::string>& DefaultDistributions() {
  static const std::vector<std::string>* d =
      new std::vector<std::string>{"task", "normal", "task", "uniform_pm1", "large_magnitude"};
  return *d;
}

std::string CorrectOnSets(const std::vector<std::string>& dists) {
  return absl::StrCat("correct on ", dists.size(), " input sets (", absl::StrJoin(dists, ", "), ")");
}

std::string CompileErrorAt(const std::string& file, int line, const std::string& message) {
  return absl::StrCat(file, line > 0 ? absl::StrCat(":", line) : "", ": ", message);
}

std::string CompileFailed(int errors, const std::string& first_error) {
  return absl::StrCat("compile failed", errors ? absl::StrCat(" (", errors, " errors)") : "",
                      first_error.empty() ? "" : ": " + first_error.substr(0, 300));
}

std::string WithProfile(const std::string& verify_summary, const std::string& judged) {
  return absl::StrCat(verify_summary, "; profile: ", judged);
}

}  // namespace kernelrl::sandbox
