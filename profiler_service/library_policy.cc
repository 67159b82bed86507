#include "profiler_service/library_policy.h"

#include <regex>
#include <sstream>

namespace kernelrl {

namespace {

// The source with comments, docstrings and other string literals blanked, so
// only code is matched. Python tokenising in miniature: enough for KernelBench.
std::string CodeOnly(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  size_t i = 0;
  while (i < source.size()) {
    const char c = source[i];
    if (c == '#') {
      while (i < source.size() && source[i] != '\n') ++i;
      continue;
    }
    if (c == '"' || c == '\'') {
      const bool triple = source.compare(i, 3, std::string(3, c)) == 0;
      const std::string quote = triple ? std::string(3, c) : std::string(1, c);
      i += quote.size();
      while (i < source.size() && source.compare(i, quote.size(), quote) != 0) {
        if (source[i] == '\\') ++i;
        else if (!triple && source[i] == '\n') break;
        ++i;
      }
      i += quote.size();
      out += " \"\" ";
      continue;
    }
    out += c;
    ++i;
  }
  return out;
}

}  // namespace

LibraryPolicy DefaultLibraryPolicy(const std::string& reference_source) {
  static const std::regex kGemm(
      R"(nn\.Linear\b|nn\.Bilinear\b|F\.linear\b|functional\.linear\b|torch\.(matmul|mm|bmm|addmm|baddbmm|einsum|tensordot)\b|\.matmul\(|[\w\)\]]\s*@\s*[\w\(])");
  static const std::regex kConv(
      R"(nn\.Conv(Transpose)?[123]d\b|F\.conv(_transpose)?[123]d\b|functional\.conv(_transpose)?[123]d\b|nn\.(LSTM|GRU|RNN)\b)");
  const std::string code = CodeOnly(reference_source);
  LibraryPolicy policy;
  policy.set_allow_cublas(std::regex_search(code, kGemm));
  policy.set_allow_cudnn(std::regex_search(code, kConv));
  return policy;
}

LibraryPolicy EffectiveLibraryPolicy(const Task& task) {
  return task.has_library_policy() ? task.library_policy() : DefaultLibraryPolicy(task.reference_source());
}

}  // namespace kernelrl
