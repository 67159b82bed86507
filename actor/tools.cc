#include "actor/tools.h"

#include <fnmatch.h>

#include <algorithm>
#include <chrono>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kernelrl::actor {
namespace {

ToolResult Error(const std::string& text) { return ToolResult{"Error: " + text, true, false, {}, 0}; }
ToolResult Ok(const std::string& text) { return ToolResult{text, false, false, {}, 0}; }

std::string Str(const Json& a, const char* key) {
  const Json* v = FindJson(a, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : "";
}
int64_t Int(const Json& a, const char* key, int64_t def) {
  const Json* v = FindJson(a, key);
  if (v == nullptr || !v->is_number()) return def;
  absl::StatusOr<int64_t> i = JsonInt(*v);
  return i.ok() ? *i : def;
}

size_t CountOccurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

// One exact replacement; the error names how the match failed.
absl::Status ReplaceOnce(std::string* text, const std::string& old_s, const std::string& new_s) {
  if (old_s.empty()) return absl::InvalidArgumentError("old_string is empty");
  if (old_s == new_s) return absl::InvalidArgumentError("old_string and new_string are the same");
  const size_t n = CountOccurrences(*text, old_s);
  if (n == 0) return absl::NotFoundError("old_string was not found in the file (it must match exactly, whitespace included)");
  if (n > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("old_string occurs ", n, " times in the file; include more surrounding text to make it unique"));
  }
  text->replace(text->find(old_s), old_s.size(), new_s);
  return absl::OkStatus();
}

bool GlobParts(const std::vector<std::string>& pat, size_t pi, const std::vector<std::string>& path, size_t si) {
  if (pi == pat.size()) return si == path.size();
  if (pat[pi] == "**") {
    for (size_t k = si; k <= path.size(); ++k) {
      if (GlobParts(pat, pi + 1, path, k)) return true;
    }
    return false;
  }
  if (si == path.size()) return false;
  if (::fnmatch(pat[pi].c_str(), path[si].c_str(), 0) != 0) return false;
  return GlobParts(pat, pi + 1, path, si + 1);
}

const char* OutcomeName(v1::Verdict::Outcome o) { return v1::Verdict::Outcome_Name(o).c_str(); }

std::string Diagnostics(const v1::Verdict& v, int max_lines) {
  std::string out;
  int n = 0;
  for (const v1::CompileDiagnostic& d : v.diagnostics()) {
    if (n++ == max_lines) {
      absl::StrAppend(&out, "... ", v.diagnostics_size() - max_lines, " more\n");
      break;
    }
    absl::StrAppend(&out, d.file(), ":", d.line(), ":", d.column(), ": ", d.severity(), ": ", d.message(), "\n");
  }
  return out;
}

std::string LogTail(const v1::Verdict& v, const std::string& key, size_t n) {
  auto it = v.logs().find(key);
  if (it == v.logs().end() || it->second.empty()) return "";
  const std::string& s = it->second;
  return s.size() > n ? "..." + s.substr(s.size() - n) : s;
}

// The figures behind the speed-ups, as the judge took them (Verdict.eager_basis / compile_basis):
// each ratio's two times, and which of them are graph-replayed.
std::string SpeedUpFigures(const v1::Verdict& v) {
  const v1::SpeedUpBasis &e = v.eager_basis(), &c = v.compile_basis();
  const bool one_candidate = e.candidate_us() == c.candidate_us() && e.candidate_graph() == c.candidate_graph();
  if (one_candidate && e.candidate_graph() == e.baseline_graph() && c.candidate_graph() == c.baseline_graph() &&
      e.candidate_graph() == c.candidate_graph()) {
    return absl::StrFormat("%scandidate %.2f us, eager %.2f us, torch.compile %.2f us",
                           e.candidate_graph() ? "graph-replayed: " : "", e.candidate_us(), e.baseline_us(),
                           c.baseline_us());
  }
  auto text = [](const v1::SpeedUpBasis& b, const char* name) {
    if (b.candidate_graph() == b.baseline_graph()) {
      return absl::StrFormat("candidate %.2f us against %s %.2f us%s", b.candidate_us(), name, b.baseline_us(),
                             b.baseline_graph() ? ", graph-replayed" : "");
    }
    return absl::StrFormat("candidate %.2f us, no graph-replayed figure, against %s %.2f us graph-replayed",
                           b.candidate_us(), name, b.baseline_us());
  };
  return absl::StrCat(text(e, "eager"), "; ", text(c, "torch.compile"));
}

}  // namespace

bool GlobMatch(const std::string& pattern, const std::string& path) {
  std::vector<std::string> pat = absl::StrSplit(pattern, '/', absl::SkipEmpty());
  std::vector<std::string> p = absl::StrSplit(path, '/', absl::SkipEmpty());
  return GlobParts(pat, 0, p, 0);
}

std::string DescribeVerdict(const std::string& which, const v1::Verdict& v) {
  const v1::Verdict::Outcome o = v.outcome();
  if (o == v1::Verdict::INFRA_ERROR) {
    return absl::StrCat("Error: the sandbox could not evaluate the workspace (INFRA_ERROR: ", v.summary(),
                        "). This says nothing about your code; call ", which, " again.");
  }
  std::string out;
  if (o == v1::Verdict::COMPILE_ERROR) {
    absl::StrAppend(&out, which, ": COMPILE_ERROR: ", v.summary(), "\n", Diagnostics(v, 30));
    const std::string log = LogTail(v, "compile", 3000);
    if (v.diagnostics_size() == 0 && !log.empty()) absl::StrAppend(&out, log, "\n");
    return out;
  }
  if (which == "Compile") {
    if (o == v1::Verdict::BAD_WORKSPACE) return absl::StrCat("Compile: BAD_WORKSPACE: ", v.summary());
    absl::StrAppend(&out, "Compile: OK (", v.diagnostics_size(), " diagnostics)\n", Diagnostics(v, 10));
    return out;
  }
  absl::StrAppend(&out, which, ": ", OutcomeName(o), v.summary().empty() ? "" : ": ", v.summary(), "\n");
  if (o != v1::Verdict::OK) {
    for (const std::string& key : {"verify", "stderr"}) {
      const std::string log = LogTail(v, key, 1500);
      if (!log.empty()) absl::StrAppend(&out, key, " log:\n", log, "\n");
    }
  }
  if (!v.flags().empty()) absl::StrAppend(&out, "flags: ", absl::StrJoin(v.flags(), ", "), "\n");
  if (which == "Profile" && o == v1::Verdict::OK) {
    absl::StrAppend(&out, absl::StrFormat("speed-up vs eager %.3fx, vs torch.compile %.3fx", v.speedup_vs_eager(),
                                          v.speedup_vs_compile()));
    // A verdict judged before the judge recorded its figures (a cached one) shows the ratios alone.
    const bool figures = v.has_eager_basis() && v.has_compile_basis();
    absl::StrAppend(&out, figures ? absl::StrCat(" (", SpeedUpFigures(v), ")") : "", "\n");
    const v1::KernelCoverage& c = v.coverage();
    if (c.total_gpu_us() > 0) {
      absl::StrAppend(&out, absl::StrFormat("GPU time: own kernels %.0f%%, library %.0f%%, other %.0f%%\n",
                                            100 * c.own_kernel_us() / c.total_gpu_us(),
                                            100 * c.library_kernel_us() / c.total_gpu_us(),
                                            100 * c.other_kernel_us() / c.total_gpu_us()));
    }
    absl::StrAppend(&out, "reward ", v.reward(), v.quarantined() ? " (quarantined for audit)" : "", "\n");
  }
  return out;
}

ToolRunner::ToolRunner(RolloutWorkspace* workspace, ShellSession* shell, EvaluationClient* evaluator,
                       const v1::Task* task, v1::ToolLimits limits, std::string request_id_prefix)
    : workspace_(workspace),
      shell_(shell),
      evaluator_(evaluator),
      task_(task),
      limits_(std::move(limits)),
      request_id_prefix_(std::move(request_id_prefix)) {}

ToolResult ToolRunner::Run(const std::string& name, const Json& a) {
  if (name == "Bash") return Bash(a);
  if (name == "BashOutput") return BashOutput(a);
  if (name == "KillBash") return KillBash(a);
  if (name == "Read") return Read(a);
  if (name == "Write") return Write(a);
  if (name == "Edit") return Edit(a);
  if (name == "MultiEdit") return MultiEdit(a);
  if (name == "Glob") return Glob(a);
  if (name == "Grep") return Grep(a);
  if (name == "TodoWrite") return TodoWrite(a);
  if (name == "Compile" || name == "Verify" || name == "Profile") return Evaluate(name);
  return Error(absl::StrCat("unknown tool \"", name, "\""));
}

ToolResult ToolRunner::Bash(const Json& a) {
  if (shell_ == nullptr) return Error("the shell is not available in this rollout");
  const std::string command = Str(a, "command");
  if (absl::StripAsciiWhitespace(command).empty()) return Error("command is empty");
  if (const Json* bg = FindJson(a, "run_in_background"); bg != nullptr && bg->is_boolean() && bg->get<bool>()) {
    absl::StatusOr<std::string> id = shell_->StartBackground(command, limits_.max_background_jobs());
    if (!id.ok()) return Error(std::string(id.status().message()));
    return Ok(absl::StrCat("started background job ", *id, "; read its output with BashOutput"));
  }
  const int64_t timeout = std::min<int64_t>(Int(a, "timeout_s", limits_.bash_default_timeout_s()),
                                            limits_.bash_max_timeout_s());
  absl::StatusOr<ShellResult> r = shell_->Run(command, static_cast<double>(timeout));
  if (!r.ok()) return Error(absl::StrCat("cannot start the shell: ", r.status().message()));
  std::string text = CapOutput(r->output, static_cast<size_t>(limits_.output_cap_bytes()));
  if (r->timed_out) {
    return Error(absl::StrCat("the command timed out after ", timeout,
                              " s and was killed with the shell; the next command starts a fresh shell in the "
                              "workspace root (cwd and variables reset). Output so far:\n",
                              text));
  }
  if (r->shell_restarted) {
    return Error(absl::StrCat("the shell exited (status ", r->exit_code,
                              "); the next command starts a fresh shell in the workspace root. Output:\n", text));
  }
  return ToolResult{absl::StrCat("exit status ", r->exit_code, "\n", text), r->exit_code != 0, false, {}, 0};
}

ToolResult ToolRunner::BashOutput(const Json& a) {
  if (shell_ == nullptr) return Error("the shell is not available in this rollout");
  absl::StatusOr<JobOutput> out = shell_->BackgroundOutput(Str(a, "bash_id"));
  if (!out.ok()) return Error(std::string(out.status().message()));
  const std::string state = out->running ? "running" : absl::StrCat("finished, exit status ", out->exit_code);
  return Ok(absl::StrCat(Str(a, "bash_id"), ": ", state, "\n", out->output));
}

ToolResult ToolRunner::KillBash(const Json& a) {
  if (shell_ == nullptr) return Error("the shell is not available in this rollout");
  absl::Status s = shell_->KillBackground(Str(a, "bash_id"));
  if (!s.ok()) return Error(std::string(s.message()));
  return Ok(absl::StrCat("killed ", Str(a, "bash_id")));
}

ToolResult ToolRunner::Read(const Json& a) {
  absl::StatusOr<std::string> rel = workspace_->Normalize(Str(a, "path"));
  if (!rel.ok()) return Error(std::string(rel.status().message()));
  absl::StatusOr<std::string> text = workspace_->ReadFile(*rel, limits_.max_file_bytes());
  if (!text.ok()) return Error(std::string(text.status().message()));
  known_files_.insert(*rel);
  if (text->empty()) return Ok(absl::StrCat(*rel, " is empty"));
  if (text->find('\0') != std::string::npos) return Error(absl::StrCat(*rel, " is a binary file"));
  std::vector<absl::string_view> lines = absl::StrSplit(*text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  const int64_t offset = Int(a, "offset", 1);
  const int64_t limit = std::min<int64_t>(Int(a, "limit", limits_.read_max_lines()), limits_.read_max_lines());
  if (offset > static_cast<int64_t>(lines.size())) {
    return Error(absl::StrCat(*rel, " has ", lines.size(), " lines; offset ", offset, " is past the end"));
  }
  std::string out;
  const int64_t end = std::min<int64_t>(static_cast<int64_t>(lines.size()), offset - 1 + limit);
  for (int64_t i = offset - 1; i < end; ++i) {
    absl::string_view line = lines[i];
    if (line.size() > 2000) line = line.substr(0, 2000);
    absl::StrAppend(&out, absl::StrFormat("%6d\t", i + 1), line, "\n");
  }
  if (end < static_cast<int64_t>(lines.size())) {
    absl::StrAppend(&out, "... (", lines.size() - end, " more lines; use offset/limit)\n");
  }
  return Ok(CapOutput(out, static_cast<size_t>(limits_.output_cap_bytes())));
}

ToolResult ToolRunner::Write(const Json& a) {
  absl::StatusOr<std::string> rel = workspace_->Normalize(Str(a, "path"));
  if (!rel.ok()) return Error(std::string(rel.status().message()));
  if (*rel == "model.py") return Error("model.py is the frozen reference; write model_new.py instead");
  if (workspace_->Exists(*rel) && !known_files_.count(*rel)) {
    return Error(absl::StrCat(*rel, " exists and has not been read in this session; Read it before overwriting it"));
  }
  const std::string content = Str(a, "content");
  absl::Status s = workspace_->WriteFile(*rel, content, limits_.max_file_bytes());
  if (!s.ok()) return Error(std::string(s.message()));
  known_files_.insert(*rel);
  return Ok(absl::StrCat("wrote ", *rel, " (", content.size(), " bytes)"));
}

ToolResult ToolRunner::Edit(const Json& a) {
  Json edits = Json::array();
  edits.push_back(Json::object({{"old_string", Json(Str(a, "old_string"))},
                           {"new_string", Json(Str(a, "new_string"))}}));
  Json multi = Json::object({{"path", Json(Str(a, "path"))}, {"edits", std::move(edits)}});
  ToolResult r = MultiEdit(multi);
  if (r.is_error) absl::StrReplaceAll({{"edit 1: ", ""}}, &r.text);
  return r;
}

ToolResult ToolRunner::MultiEdit(const Json& a) {
  absl::StatusOr<std::string> rel = workspace_->Normalize(Str(a, "path"));
  if (!rel.ok()) return Error(std::string(rel.status().message()));
  if (*rel == "model.py") return Error("model.py is the frozen reference; edit model_new.py instead");
  absl::StatusOr<std::string> text = workspace_->ReadFile(*rel, limits_.max_file_bytes());
  if (!text.ok()) return Error(std::string(text.status().message()));
  std::string updated = *text;
  const Json* edits = FindJson(a, "edits");
  int k = 0;
  for (const Json& e : *edits) {
    ++k;
    absl::Status s = ReplaceOnce(&updated, Str(e, "old_string"), Str(e, "new_string"));
    if (!s.ok()) {
      return Error(absl::StrCat("edit ", k, ": ", s.message(), " (", *rel, " is unchanged)"));
    }
  }
  absl::Status s = workspace_->WriteFile(*rel, updated, limits_.max_file_bytes());
  if (!s.ok()) return Error(std::string(s.message()));
  known_files_.insert(*rel);
  return Ok(absl::StrCat("edited ", *rel, " (", k, k == 1 ? " replacement)" : " replacements)"));
}

ToolResult ToolRunner::Glob(const Json& a) {
  const std::string pattern = std::string(absl::StripPrefix(Str(a, "pattern"), "./"));
  if (pattern.empty()) return Error("pattern is empty");
  std::vector<std::string> hits;
  for (const std::string& f : workspace_->ListFiles()) {
    if (GlobMatch(pattern, f)) hits.push_back(f);
  }
  if (hits.empty()) return Ok(absl::StrCat("no files match ", pattern));
  return Ok(CapOutput(absl::StrJoin(hits, "\n") + "\n", static_cast<size_t>(limits_.output_cap_bytes())));
}

ToolResult ToolRunner::Grep(const Json& a) {
  std::regex re;
  try {
    re = std::regex(Str(a, "pattern"), std::regex::extended);
  } catch (const std::regex_error& e) {
    return Error(absl::StrCat("invalid regular expression: ", e.what()));
  }
  std::string scope;
  if (const std::string p = Str(a, "path"); !p.empty() && p != "." && p != "./") {
    absl::StatusOr<std::string> rel = workspace_->Normalize(p);
    if (!rel.ok()) return Error(std::string(rel.status().message()));
    scope = *rel;
  }
  const std::string glob = Str(a, "glob");
  std::string out;
  int matches = 0;
  for (const std::string& f : workspace_->ListFiles()) {
    if (!scope.empty() && f != scope && !absl::StartsWith(f, scope + "/")) continue;
    if (!glob.empty() && !GlobMatch(glob, f) && !GlobMatch(glob, f.substr(f.rfind('/') + 1))) continue;
    absl::StatusOr<std::string> text = workspace_->ReadFile(f, limits_.max_file_bytes());
    if (!text.ok() || text->find('\0') != std::string::npos) continue;
    int line_no = 0;
    for (absl::string_view line : absl::StrSplit(*text, '\n')) {
      ++line_no;
      if (!std::regex_search(line.begin(), line.end(), re)) continue;
      if (++matches > 500) break;
      absl::StrAppend(&out, f, ":", line_no, ":", line.substr(0, 500), "\n");
    }
  }
  if (matches == 0) return Ok("no matches");
  if (matches > 500) absl::StrAppend(&out, "... (more than 500 matches; narrow the pattern)\n");
  return Ok(CapOutput(out, static_cast<size_t>(limits_.output_cap_bytes())));
}

ToolResult ToolRunner::TodoWrite(const Json& a) {
  std::string out = "todo list updated:\n";
  int done = 0, n = 0;
  for (const Json& t : *FindJson(a, "todos")) {
    const std::string status = Str(t, "status");
    done += status == "completed";
    ++n;
    absl::StrAppend(&out, status == "completed" ? "[x] " : status == "in_progress" ? "[~] " : "[ ] ",
                    Str(t, "content"), "\n");
  }
  absl::StrAppend(&out, done, "/", n, " completed\n");
  return Ok(out);
}

ToolResult ToolRunner::Evaluate(const std::string& which) {
  if (evaluator_ == nullptr) return Error("no sandbox is configured for this rollout");
  v1::EvaluateRequest req;
  *req.mutable_task() = *task_;
  *req.mutable_workspace() = workspace_->Snapshot();
  req.set_skip_profile(which != "Profile");
  req.set_request_id(absl::StrCat(request_id_prefix_, "/eval-", ++num_evaluations_));
  const auto t0 = std::chrono::steady_clock::now();
  ToolResult r;
  r.verdict = evaluator_->Evaluate(req);
  r.sandbox_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.has_verdict = true;
  r.text = DescribeVerdict(which, r.verdict);
  const v1::Verdict::Outcome o = r.verdict.outcome();
  r.is_error = which == "Compile" ? (o == v1::Verdict::COMPILE_ERROR || o == v1::Verdict::BAD_WORKSPACE ||
                                     o == v1::Verdict::INFRA_ERROR)
                                  : o != v1::Verdict::OK;
  return r;
}

}  // namespace kernelrl::actor
