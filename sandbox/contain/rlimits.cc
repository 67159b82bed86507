// Resource limits. RLIMIT_AS is only for compilers: CUDA reserves terabytes
// of virtual address space and fails to initialise under it, so GPU
// candidates get RLIMIT_DATA (private writable memory) instead.
#include <sys/resource.h>

#include <cerrno>
#include <string>

#include "sandbox/contain/steps.h"

namespace kernelrl::sandbox {
namespace {

bool SetLimit(int resource, const char* name, long long value, StepLog& log) {
  if (value <= 0) return true;
  struct rlimit rl;
  rl.rlim_cur = static_cast<rlim_t>(value);
  rl.rlim_max = static_cast<rlim_t>(value);
  if (setrlimit(resource, &rl) != 0) {
    log.Failed("rlimit", std::string("setrlimit(") + name + ", " + std::to_string(value) + ")", errno,
               std::string(name) + " not capped");
    return false;
  }
  return true;
}

}  // namespace

bool ApplyRlimits(const KrPolicy& p, StepLog& log) {
  bool ok = true;
  // CPU: soft = hard would SIGKILL; soft one second earlier gives SIGXCPU first.
  ok &= SetLimit(RLIMIT_CPU, "RLIMIT_CPU", p.cpu_seconds, log);
  ok &= SetLimit(RLIMIT_DATA, "RLIMIT_DATA", p.data_bytes, log);
  ok &= SetLimit(RLIMIT_AS, "RLIMIT_AS", p.as_bytes, log);
  ok &= SetLimit(RLIMIT_FSIZE, "RLIMIT_FSIZE", p.fsize_bytes, log);
  ok &= SetLimit(RLIMIT_NOFILE, "RLIMIT_NOFILE", p.nofile, log);
  if (p.core_bytes_plus1 > 0) {
    struct rlimit rl = {static_cast<rlim_t>(p.core_bytes_plus1 - 1), static_cast<rlim_t>(p.core_bytes_plus1 - 1)};
    if (setrlimit(RLIMIT_CORE, &rl) != 0) {
      log.Failed("rlimit", "setrlimit(RLIMIT_CORE)", errno, "core dumps possible");
      ok = false;
    }
  }
  if (ok) log.Ok("rlimits");
  return ok;
}

}  // namespace kernelrl::sandbox
