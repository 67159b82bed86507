// C entry points of libkernelrl_contain.so, called through ctypes by the
// trusted Python harness (sandbox/harness/contain.py) right after it forks a
// candidate or reference process: the isolation logic stays in C++.
#include <algorithm>
#include <cstring>
#include <string>

#include "sandbox/contain/contain.h"

namespace {

void CopyLog(const kernelrl::sandbox::StepLog& log, char* out, int out_len) {
  if (out == nullptr || out_len <= 0) return;
  const std::string& text = log.text();
  const size_t n = std::min(text.size(), static_cast<size_t>(out_len - 1));
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

}  // namespace

extern "C" {

// phase: 1 namespaces, 2 child setup, 3 seccomp. Returns the number of failed
// steps (0 = all applied); the step log is written to `log`.
int kr_contain_phase(const KrPolicy* p, int phase, char* log, int log_len) {
  kernelrl::sandbox::StepLog steps;
  if (phase == 1) kernelrl::sandbox::ContainPhaseNamespaces(*p, steps);
  if (phase == 2) kernelrl::sandbox::ContainPhaseChild(*p, steps);
  if (phase == 3) kernelrl::sandbox::ContainPhaseSeccomp(*p, steps);
  CopyLog(steps, log, log_len);
  return steps.failures();
}

int kr_probe_host(void) { return kernelrl::sandbox::ProbeHostCapabilities(); }

// Waits for `pid` (a child of the caller) with a wall limit; see Supervise().
int kr_supervise(int pid, double wall_seconds, int* exit_code, int* term_signal, int* timed_out,
                 double* wall_ms, double* cpu_ms) {
  kernelrl::sandbox::SuperviseResult r = kernelrl::sandbox::Supervise(pid, wall_seconds);
  *exit_code = r.exit_code;
  *term_signal = r.term_signal;
  *timed_out = r.timed_out ? 1 : 0;
  *wall_ms = r.wall_ms;
  *cpu_ms = r.cpu_ms;
  return 0;
}

}  // extern "C"
