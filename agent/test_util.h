// Helpers shared by the agent's tests: where to write, and how to run a Python
// fixture generator (HF transformers/tokenizers as the reference).
#ifndef KERNELRL_AGENT_TEST_UTIL_H_
#define KERNELRL_AGENT_TEST_UTIL_H_

#include <cstdlib>
#include <string>

namespace kernelrl::agent::testing {

inline std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

// Runs `python3 SCRIPT OUT` ($KERNELRL_PYTHON overrides python3) with its
// output in OUT.log. Returns the exit status (0 = ok).
inline int RunFixtureScript(const std::string& script, const std::string& out) {
  const char* py = std::getenv("KERNELRL_PYTHON");
  std::string cmd = std::string(py != nullptr ? py : "python3") + " " + script + " '" + out + "' > '" + out +
                    ".log' 2>&1";
  return std::system(cmd.c_str());
}

}  // namespace kernelrl::agent::testing

#endif  // KERNELRL_AGENT_TEST_UTIL_H_
