// StepLog: the record of one isolation sequence. Every step appends one line
// "<step>: ok" or "<step>: FAILED <syscall>(<args>): <errno text> -> <what
// that means>", so an operator reads exactly which protection a run had.
#ifndef KERNELRL_SANDBOX_CONTAIN_STEP_LOG_H_
#define KERNELRL_SANDBOX_CONTAIN_STEP_LOG_H_

#include <string>

namespace kernelrl::sandbox {

class StepLog {
 public:
  void Ok(const std::string& step) { text_ += step + ": ok\n"; }
  // Records a failed syscall with errno (read by the caller right after the call).
  void Failed(const std::string& step, const std::string& call, int err,
              const std::string& consequence);
  void Note(const std::string& line) { text_ += line + "\n"; }
  const std::string& text() const { return text_; }
  int failures() const { return failures_; }

 private:
  std::string text_;
  int failures_ = 0;
};

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_CONTAIN_STEP_LOG_H_
