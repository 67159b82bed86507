// Helpers shared by the agent's tests: where to write, and how to run a Python
// fixture generator (HF transformers/tokenizers as the reference).
#ifndef KERNELRL_AGENT_TEST_UTIL_H_
#define KERNELRL_AGENT_TEST_UTIL_H_

#include <cstdlib>
#include <string>

#include "common/testing/testing.h"

namespace kernelrl::agent::testing {

using ::kernelrl::testing::TempDir;

// Runs `python3 SCRIPT OUT [EXTRA]` ($KERNELRL_PYTHON overrides python3)
// with its output in OUT.log. Returns the exit status (0 = ok).
inline int RunFixtureScript(const std::string& script, const std::string& out, const std::string& extra = "") {
  std::string cmd = ::kernelrl::testing::Python() + " " + script + " '" + out + "' " + extra + " > '" + out +
                    ".log' 2>&1";
  return std::system(cmd.c_str());
}

// A small Qwen2-style tokenizer.json with the ChatML tokens, trained by HF
// `tokenizers` at test time (needs //agent/tokenizer:testdata/make_tokenizer_fixtures.py
// in the test's data). Returns its path, or "" on failure.
inline std::string MakeChatTokenizer(const std::string& name = "chat_tokenizer") {
  const std::string dir = TempDir() + "/" + name;
  if (RunFixtureScript("agent/tokenizer/testdata/make_tokenizer_fixtures.py", dir, "chat") != 0) return "";
  return dir + "/tokenizer.json";
}

}  // namespace kernelrl::agent::testing

#endif  // KERNELRL_AGENT_TEST_UTIL_H_
