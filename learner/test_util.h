// Helpers shared by the learner's tests: where to write, how to run the
// Python fixture generator (HF transformers/tokenizers as the reference).
#ifndef KERNELRL_LEARNER_TEST_UTIL_H_
#define KERNELRL_LEARNER_TEST_UTIL_H_

#include <cstdlib>
#include <string>

namespace kernelrl::learner::testing {

inline std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

// Runs learner/testdata/make_fixtures.py MODE OUT with $KERNELRL_PYTHON (or
// python3). Returns the exit status (0 = ok).
inline int RunFixtureScript(const std::string& mode, const std::string& out) {
  const char* py = std::getenv("KERNELRL_PYTHON");
  std::string cmd = std::string(py != nullptr ? py : "python3") + " learner/testdata/make_fixtures.py " + mode + " '" +
                    out + "' > '" + out + "." + mode + ".log' 2>&1";
  return std::system(cmd.c_str());
}

}  // namespace kernelrl::learner::testing

#endif  // KERNELRL_LEARNER_TEST_UTIL_H_
