#include "sandbox/contain/step_log.h"

#include <cstring>

namespace kernelrl::sandbox {

void StepLog::Failed(const std::string& step, const std::string& call, int err,
                     const std::string& consequence) {
  ++failures_;
  text_ += step + ": FAILED " + call + ": " + std::strerror(err) + " -> " + consequence + "\n";
}

}  // namespace kernelrl::sandbox
