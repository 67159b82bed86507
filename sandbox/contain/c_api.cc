// C entry points of libkernelrl_contain.so, called through ctypes by the
// trusted Python harness (sandbox/harness/contain.py) right after it forks a
// candidate or reference process: the isolation logic stays in C++.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "sandbox/contain/contain.h"
#include "sandbox/contain/host_memory.h"
#include "sandbox/contain/roles.h"
#include "sandbox/contain/view_defaults.h"

namespace {

void CopyText(const std::string& text, char* out, int out_len) {
  if (out == nullptr || out_len <= 0) return;
  const size_t n = std::min(text.size(), static_cast<size_t>(out_len - 1));
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

void CopyLog(const kernelrl::sandbox::StepLog& log, char* out, int out_len) { CopyText(log.text(), out, out_len); }

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

// KrPolicy's layout as this library was built, so the harness's ctypes mirror
// can be checked field by field when it loads (a mismatch there would make
// the library read namespaces and limits from the wrong bytes): the struct's
// size, and a field's offset by name (-1 for a name it does not have).
int kr_policy_size(void) { return static_cast<int>(sizeof(KrPolicy)); }

namespace {
#define KR_FIELD(name) {#name, offsetof(KrPolicy, name)}
const struct {
  const char* name;
  size_t offset;
} kPolicyFields[] = {
    KR_FIELD(user_ns),           KR_FIELD(pid_ns),              KR_FIELD(net_ns),
    KR_FIELD(mount_ns),          KR_FIELD(ipc_ns),              KR_FIELD(uts_ns),
    KR_FIELD(readonly_root),     KR_FIELD(mount_proc),          KR_FIELD(scratch_dir),
    KR_FIELD(scratch_bytes),     KR_FIELD(writable_dirs),       KR_FIELD(hidden_dirs),
    KR_FIELD(cpu_seconds),       KR_FIELD(data_bytes),          KR_FIELD(as_bytes),
    KR_FIELD(fsize_bytes),       KR_FIELD(nofile),              KR_FIELD(core_bytes_plus1),
    KR_FIELD(close_fds),         KR_FIELD(keep_fds),            KR_FIELD(num_keep_fds),
    KR_FIELD(new_process_group), KR_FIELD(parent_death_signal), KR_FIELD(seccomp_profile),
    KR_FIELD(new_root),          KR_FIELD(root_dir),            KR_FIELD(ro_paths),
    KR_FIELD(job_ro_dirs),       KR_FIELD(dev_paths),           KR_FIELD(run_as_uid),
    KR_FIELD(run_as_gid),
};
#undef KR_FIELD
}  // namespace

int kr_policy_offset(const char* field) {
  for (const auto& f : kPolicyFields) {
    if (field != nullptr && std::strcmp(field, f.name) == 0) return static_cast<int>(f.offset);
  }
  return -1;
}

// How many fields KrPolicy has: a mirror that lacks one is refused too.
int kr_policy_field_count(void) { return static_cast<int>(sizeof(kPolicyFields) / sizeof(kPolicyFields[0])); }

// The role table (roles.h) for the harness: role 1 compiler, 2 zygote,
// 3 candidate, 4 agent shell; `steps` KrStep bits (candidate), the other
// inputs as RoleInputs. Fills *out (string fields NULL); returns 0, or -1
// for an unknown role (out untouched).
int kr_policy_for(int role, int caps, int steps, int running_as_root, int contain, KrPolicy* out) {
  using kernelrl::sandbox::Role;
  static const Role kRoles[] = {Role::kCompiler, Role::kZygote, Role::kCandidate, Role::kAgentShell};
  if (role < 1 || role > 4 || out == nullptr) return -1;
  kernelrl::sandbox::RoleInputs in;
  in.steps = steps;
  in.running_as_root = running_as_root != 0;
  in.contain = contain != 0;
  *out = kernelrl::sandbox::PolicyFor(kRoles[role - 1], caps, in);
  return 0;
}

// The KrStep bit of an isolation step name, 0 when unknown.
int kr_step_bit(const char* step) { return step == nullptr ? 0 : kernelrl::sandbox::StepBit(step); }

// The name of KrCapability bit number `index`, NULL past the last: the
// harness builds its name -> bit map from this (no copy of the list).
const char* kr_capability_name(int index) { return kernelrl::sandbox::CapabilityName(index); }

// 1 when the host (kr_probe_host bits) can apply the isolation step named
// `step` (sandbox/contain/roles.h's table); 0 otherwise, an unknown name included.
int kr_step_allowed(const char* step, int caps) {
  return step != nullptr && kernelrl::sandbox::StepAllowed(step, caps) ? 1 : 0;
}

// The default view lists (view_defaults.h), ':'-joined: which 0 = GPU device
// paths, 1 = GPU read-only paths. Returns the length of the full text.
int kr_default_view(int which, char* out, int out_len) {
  const auto& list = which == 0 ? kernelrl::sandbox::DefaultGpuDevPaths() : kernelrl::sandbox::DefaultGpuRoPaths();
  std::string text;
  for (const std::string& p : list) text += (text.empty() ? "" : ":") + p;
  CopyText(text, out, out_len);
  return static_cast<int>(text.size());
}

// Field order mirrors KrSuperviseResult in sandbox/harness/contain.py.
struct KrSuperviseResult {
  int exit_code;
  int term_signal;
  int timed_out;
  int memory_exceeded;
  double wall_ms;
  double cpu_ms;
  long long memory_at_kill_bytes;
  long long peak_memory_bytes;
  int memory_samples;
};

// Waits for `pid` (a child of the caller): Supervise() with the wall limit
// and the host-memory cap (memory_cap_bytes 0 = none); proc_fd is the procfs
// the caller opened before forking (-1 = "/proc").
int kr_supervise(int pid, double wall_seconds, long long memory_cap_bytes, double memory_poll_ms,
                    int proc_fd, KrSuperviseResult* out) {
  kernelrl::sandbox::SuperviseOptions o;
  o.wall_seconds = wall_seconds;
  o.memory_cap_bytes = memory_cap_bytes;
  o.memory_poll_ms = memory_poll_ms;
  o.proc_fd = proc_fd;
  kernelrl::sandbox::SuperviseResult r = kernelrl::sandbox::Supervise(pid, o);
  out->exit_code = r.exit_code;
  out->term_signal = r.term_signal;
  out->timed_out = r.timed_out ? 1 : 0;
  out->memory_exceeded = r.memory_exceeded ? 1 : 0;
  out->wall_ms = r.wall_ms;
  out->cpu_ms = r.cpu_ms;
  out->memory_at_kill_bytes = r.memory_at_kill_bytes;
  out->peak_memory_bytes = r.peak_memory_bytes;
  out->memory_samples = r.memory_samples;
  return 0;
}

// cgroup v2 memory backstop (host_memory.h). Each returns 0 on success and
// writes the reason for a failure into `why`.
int kr_cgroup_probe(const char* parent, char* why, int why_len) {
  const std::string err = kernelrl::sandbox::ProbeMemoryCgroup(parent ? parent : "");
  CopyText(err, why, why_len);
  return err.empty() ? 0 : -1;
}

int kr_cgroup_create(const char* parent, const char* name, long long max_bytes, char* path, int path_len,
                     char* why, int why_len) {
  std::string err;
  const std::string made = kernelrl::sandbox::CreateMemoryCgroup(parent ? parent : "", name, max_bytes, &err);
  CopyText(made, path, path_len);
  CopyText(err, why, why_len);
  return made.empty() ? -1 : 0;
}

int kr_cgroup_enter(const char* path, char* why, int why_len) {
  std::string err;
  const bool ok = kernelrl::sandbox::EnterCgroup(path, &err);
  CopyText(err, why, why_len);
  return ok ? 0 : -1;
}

// Returns memory.events oom_kill of the cgroup (-1 unreadable), then removes it.
long long kr_cgroup_remove(const char* path, long long* peak_bytes) {
  return kernelrl::sandbox::RemoveMemoryCgroup(path, peak_bytes);
}

}  // extern "C"
