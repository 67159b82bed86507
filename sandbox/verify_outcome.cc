#include "sandbox/verify_outcome.h"

#include <csignal>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "sandbox/contain/host_memory.h"
#include "sandbox/verdict_text.h"

namespace kernelrl::sandbox {
namespace {

using v1::sandbox::HarnessJob;
using v1::sandbox::HarnessVerifyReply;
using v1::sandbox::HarnessVerifyFacts;

constexpr size_t kSummaryBytes = 500;

// Line breaks as Python's str.splitlines sees them (ASCII ones, and the UTF-8
// encodings of U+0085, U+2028, U+2029): the candidate's messages come from Python.
bool IsAsciiBreak(char c) { return c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e); }
size_t UnicodeBreakAt(const std::string& s, size_t i) {  // its length in bytes, 0 if none
  if (i + 1 < s.size() && s[i] == '\xc2' && s[i + 1] == '\x85') return 2;
  if (i + 2 < s.size() && s[i] == '\xe2' && s[i + 1] == '\x80' && (s[i + 2] == '\xa8' || s[i + 2] == '\xa9')) return 3;
  return 0;
}
bool IsAsciiSpace(char c) { return c == ' ' || c == '\t' || IsAsciiBreak(c) || c == 0x1f; }

// CapHead at a UTF-8 character boundary (a proto string must stay valid UTF-8).
std::string CapSummary(const std::string& s) {
  if (s.size() <= kSummaryBytes) return s;
  size_t cut = kSummaryBytes;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + " [... " + std::to_string(s.size() - cut) + " bytes cut]";
}

}  // namespace

const std::vector<std::string>& VerifyHackFlags() {
  static const std::vector<std::string> kFlags = {
      "async_side_stream", "guard_removed", "monkey_patch", "output_aliases_input", "output_tensor_subclass",
      "threads_spawned", "torch_op_in_forward"};
  return kFlags;
}

std::string SignalName(int signal) {
  static const char* const kNames[] = {
      nullptr,     "SIGHUP",  "SIGINT",    "SIGQUIT", "SIGILL",   "SIGTRAP", "SIGABRT", "SIGBUS",
      "SIGFPE",    "SIGKILL", "SIGUSR1",   "SIGSEGV", "SIGUSR2",  "SIGPIPE", "SIGALRM", "SIGTERM",
      "SIGSTKFLT", "SIGCHLD", "SIGCONT",   "SIGSTOP", "SIGTSTP",  "SIGTTIN", "SIGTTOU", "SIGURG",
      "SIGXCPU",   "SIGXFSZ", "SIGVTALRM", "SIGPROF", "SIGWINCH", "SIGIO",   "SIGPWR",  "SIGSYS"};
  if (signal > 0 && signal < static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) return kNames[signal];
  if (signal == SIGRTMIN) return "SIGRTMIN";
  if (signal == SIGRTMAX) return "SIGRTMAX";
  return std::to_string(signal);
}

std::string LastLine(const std::string& text) {
  size_t begin = 0, end = text.size();
  while (begin < end && IsAsciiSpace(text[begin])) ++begin;
  while (end > begin && IsAsciiSpace(text[end - 1])) --end;
  size_t start = begin;
  for (size_t i = begin; i < end; ++i) {
    if (IsAsciiBreak(text[i])) {
      start = i + 1;
    } else if (size_t n = UnicodeBreakAt(text, i); n > 0 && i + n <= end) {
      start = i + n;
      i += n - 1;
    }
  }
  return text.substr(start, end - start);
}

VerifyOutcome DecideVerifyOutcome(const HarnessJob& job, const HarnessVerifyReply& reply) {
  const HarnessVerifyFacts& f = reply.facts();
  std::set<std::string> flags(f.candidate_flags().begin(), f.candidate_flags().end());
  std::vector<std::string> details;
  for (const std::string& d : f.details()) {
    if (!d.empty()) details.push_back(d);
  }
  int passed = 0;
  for (const auto& s : f.sets()) passed += s.ok() ? 1 : 0;
  const int n = job.num_sets();
  const int sets = f.sets_size();
  const int sig = f.signal();
  const bool has_err = f.has_candidate_error();
  const v1::sandbox::HarnessCandidateError& err = f.candidate_error();
  const std::string last = LastLine(err.message());

  auto out = [&](Verdict::Outcome outcome, const std::string& summary, std::vector<std::string> extra = {}) {
    VerifyOutcome o;
    o.outcome = outcome;
    o.summary = CapSummary(summary);
    std::set<std::string> all = flags;
    all.insert(extra.begin(), extra.end());
    o.flags.assign(all.begin(), all.end());
    o.sets_passed = passed;
    return o;
  };

  if (!reply.has_facts()) return out(Verdict::INFRA_ERROR, "zygote sent no verify facts");
  if (!f.ref_error().empty()) {
    return out(Verdict::INFRA_ERROR, "reference failed: " + LastLine(f.ref_error()));
  }
  if (sig == SIGSYS) {
    return out(Verdict::SANDBOX_VIOLATION,
               absl::StrCat("killed by seccomp (SIGSYS)", f.profile_started() ? " while being profiled" : "",
                            ": forbidden system call (process creation, network socket, ptrace, mount...)"),
               {"seccomp_kill"});
  }
  if (has_err && err.kind() == "violation") {
    const std::string what = err.audit_size() > 0 ? absl::StrJoin(err.audit(), "; ") : last;
    return out(Verdict::SANDBOX_VIOLATION, "sandbox violation: " + what, {"audit_violation"});
  }
  std::set<std::string> hacks;
  for (const std::string& h : VerifyHackFlags()) {
    if (flags.count(h)) hacks.insert(h);
  }
  const bool torch_op = has_err && err.kind() == "torch_op";
  if (!hacks.empty() || torch_op) {
    if (torch_op) hacks.insert("torch_op_in_forward");
    std::vector<std::string> extra(details.begin(), details.begin() + std::min<size_t>(2, details.size()));
    if (err.torch_ops_size() > 0) extra.push_back(absl::StrJoin(err.torch_ops(), ", "));
    const std::string why = absl::StrJoin(extra, "; ");
    return out(Verdict::HACK_DETECTED, absl::StrCat(absl::StrJoin(hacks, ", "), why.empty() ? "" : " (" + why + ")"),
               torch_op ? std::vector<std::string>{"torch_op_in_forward"} : std::vector<std::string>{});
  }
  if (f.memory_exceeded()) {
    return out(Verdict::CRASH,
               absl::StrCat("host memory ", FormatBytes(f.memory_at_kill_bytes()), " > cap ",
                            FormatBytes(job.resident_memory_bytes()),
                            ": killed (resident memory of the candidate's processes; the watchdog killed the "
                            "process group)"),
               {"host_memory_cap"});
  }
  if (f.cgroup_oom_kills() > 0) {
    return out(Verdict::CRASH,
               absl::StrCat("host memory over the candidate cgroup's memory.max (",
                            FormatBytes(job.cgroup_memory_bytes()), "): killed by the kernel OOM killer"),
               {"host_memory_cap"});
  }
  if (f.timed_out()) {
    return out(Verdict::TIMEOUT,
               absl::StrFormat("verify ran past its %g s wall limit (process group killed)", job.wall_seconds()));
  }
  if (sig == SIGXCPU) return out(Verdict::TIMEOUT, "CPU-time limit reached (SIGXCPU)");
  if (has_err && (err.kind() == "cuda" || (err.kind() == "kernel_error" && job.device() == "cuda"))) {
    return out(Verdict::CUDA_ERROR, "CUDA error: " + last);
  }
  if (has_err && err.kind() == "oom") return out(Verdict::CRASH, "out of memory: " + last, {"oom"});
  if (has_err) return out(Verdict::CRASH, absl::StrCat(err.stage(), " raised: ", last));
  if (sig != 0) {
    return out(Verdict::CRASH, absl::StrCat("candidate killed by ", SignalName(sig),
                                            sig == SIGKILL ? " (memory limit or OOM killer)" : ""));
  }
  if (f.mutated() || f.profile_mutated()) {
    return out(Verdict::WRONG_ANSWER, "forward modified its inputs", {"input_mutation"});
  }
  if (f.written_after_done()) {
    return out(Verdict::HACK_DETECTED,
               "outputs changed after the executor said its block was done (work deferred past the trusted clock)",
               {"output_written_after_done"});
  }
  for (const auto& s : f.sets()) {
    if (!s.ok()) return out(Verdict::WRONG_ANSWER, s.detail());
  }
  if (f.recheck_failures() != 0) {
    return out(Verdict::WRONG_ANSWER,
               absl::StrCat("a timed forward was wrong (", f.recheck_failures(), " failing of ", f.rechecks(),
                            " forwards compared): ", f.profile_detail()),
               {"recheck_failed"});
  }
  if (f.exit_code() != 0 && sets < n) {
    return out(Verdict::CRASH, absl::StrCat("candidate exited with code ", f.exit_code()));
  }
  if (sets == n && f.candidate_done()) {
    std::vector<std::string> dists;
    for (const auto& s : f.sets()) dists.push_back(s.dist());
    return out(Verdict::OK, CorrectOnSets(dists));
  }
  if (sets < n) {
    return out(Verdict::CRASH, absl::StrCat("candidate stopped after ", sets, " of ", n, " input sets",
                                            details.empty() ? "" : ": " + details.back()));
  }
  if (f.profile_started()) {
    return out(Verdict::CRASH, absl::StrCat("candidate stopped while being profiled",
                                            f.profile_detail().empty() ? "" : ": " + f.profile_detail()));
  }
  return out(Verdict::INFRA_ERROR, "verify ended without a complete report");
}

}  // namespace kernelrl::sandbox
