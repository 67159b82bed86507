// Test helper: start a binary with arguments, capture its stderr, wait with a
// deadline. Used by the service lifecycle and config tests.
#ifndef KERNELRL_TESTS_SUBPROCESS_H_
#define KERNELRL_TESTS_SUBPROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/testing/testing.h"  // TempDir, WaitFor: the tests using Subprocess use them.

namespace kernelrl::testing {

class Subprocess {
 public:
  // Starts `path args...` with stderr (and stdout) redirected to `log_path`.
  Subprocess(const std::string& path, const std::vector<std::string>& args, const std::string& log_path);
  ~Subprocess();  // SIGKILLs the process if it is still running.

  void Signal(int signal_number);
  // Waits up to `timeout_s`; returns true if the process exited (status in exit_code/term_signal).
  bool Wait(double timeout_s);
  int exit_code() const { return exit_code_; }
  int term_signal() const { return term_signal_; }
  std::string Log() const;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int exit_code_ = -1;
  int term_signal_ = 0;
  std::string log_path_;
};

// Reads "key=value" lines from a port file, waiting up to `timeout_s` for it to appear.
bool ReadPortFile(const std::string& path, double timeout_s, int* grpc_port, int* metrics_port);

}  // namespace kernelrl::testing

#endif  // KERNELRL_TESTS_SUBPROCESS_H_
