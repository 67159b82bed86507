#include "sandbox/compile_stage.h"

#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sandbox/child_env.h"
#include "sandbox/contain/contain.h"
#include "sandbox/contain/echo.h"
#include "sandbox/contain/roles.h"
#include "sandbox/contain/root_plan.h"
#include "sandbox/contain/spawn.h"
#include "sandbox/diagnostics.h"
#include "sandbox/verdict_text.h"
#include "common/file.h"
#include "common/sha256.h"
#include "common/status_util.h"

namespace kernelrl::sandbox {
namespace {

// In a cache entry: the diagnostics of the build that made it (a Verdict holding only them).
constexpr char kDiagnosticsFile[] = "diagnostics.pb";

std::string Or(const std::string& v, const std::string& fallback) { return v.empty() ? fallback : v; }
double OrD(double v, double fallback) { return v > 0 ? v : fallback; }
int64_t OrI(int64_t v, int64_t fallback) { return v > 0 ? v : fallback; }

// SandboxConfig.cuda_home, nvcc, cxx and python: their defaults are applied
// once, with the others, by the evaluator's WithDefaults.
std::string CudaHome(const SandboxConfig& c) { return c.cuda_home(); }

std::string Tail(const std::string& s, size_t n) { return CapTail(s, n); }  // says when it cut

}  // namespace

CompileStage::CompileStage(const SandboxConfig& config, std::string harness_dir, int contain_caps)
    : config_(config),
      harness_dir_(std::move(harness_dir)),
      caps_(contain_caps),
      cache_dir_(config.cache_dir()),
      max_parallel_(config.compile().max_parallel() > 0
                        ? config.compile().max_parallel()
                        : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2)) {}

std::vector<std::string> CompileStage::Command(const ValidatedWorkspace& ws, const std::string& workspace_dir,
                                               const std::string& out_dir) const {
  const std::string arch = Or(config_.compile().cuda_arch(), "sm_90");
  std::vector<std::string> cmd;
  switch (ws.layout) {
    case Workspace::FAST_PATH:
      // Per-thread default stream: a launch without a stream goes to the
      // executor's thread's own stream, which torch's ops share there and a
      // CUDA graph can capture (graph-replayed blocks; the legacy stream 0
      // cannot be captured).
      cmd = {config_.nvcc(), "-O3", "--use_fast_math", "-arch=" + arch, "-std=c++17", "-shared",
             "--default-stream", "per-thread",
             "-Xcompiler", "-fPIC", "-I", workspace_dir, "-o", out_dir + "/kernels.so",
             // cuBLAS (and cuBLASLt, its fused epilogues) is allowed for GEMM;
             // linked only when a kernel uses it.
             "-Xlinker", "--as-needed", "-Xlinker", "-rpath=" + CudaHome(config_) + "/lib64"};
      for (const std::string& src : ws.kernel_sources) cmd.push_back(workspace_dir + "/" + src);
      cmd.push_back("-lcublas");
      cmd.push_back("-lcublasLt");
      return cmd;
    case Workspace::CPU:
      cmd = {config_.cxx(), "-O3", "-std=c++17", "-shared", "-fPIC", "-fno-openmp",
             "-I", workspace_dir, "-o", out_dir + "/kernels.so"};
      break;
    default:
      return {config_.python(), harness_dir_ + "/build_ext.py", "--layout",
              Workspace::Layout_Name(ws.layout), "--workspace", workspace_dir, "--out", out_dir, "--arch", arch};
  }
  for (const std::string& src : ws.kernel_sources) cmd.push_back(workspace_dir + "/" + src);
  return cmd;
}

std::string CompileStage::CacheKey(const ValidatedWorkspace& ws) const {
  return Sha256Hex(absl::StrCat(ws.content_hash, "|", Workspace::Layout_Name(ws.layout), "|",
                                config_.compile().cuda_arch(), "|", config_.nvcc(), "|", config_.cxx(),
                                "|v1"));
}

int CompileStage::in_flight() const {
  absl::MutexLock l(&mu_);
  return in_flight_;
}

int CompileStage::waiting() const {
  absl::MutexLock l(&mu_);
  return waiting_;
}

absl::StatusOr<CompileResult> CompileStage::Compile(const ValidatedWorkspace& ws, const std::string& workspace_dir) {
  const std::string final_dir = cache_dir_ + "/" + CacheKey(ws);
  struct stat st;
  if (stat((final_dir + "/manifest.json").c_str(), &st) == 0) {
    CompileResult hit;
    hit.ok = true;
    hit.cache_hit = true;
    hit.artifact_dir = final_dir;
    hit.summary = "cache hit";
    // The build's warnings, as the build that made the entry reported them: the same source reads
    // the same at every compile.
    Verdict kept;
    if (auto text = ReadFileToString(final_dir + "/" + kDiagnosticsFile); text.ok() && kept.ParseFromString(*text)) {
      hit.diagnostics.assign(kept.diagnostics().begin(), kept.diagnostics().end());
    }
    return hit;
  }
  if (ws.kernel_sources.empty() && (ws.layout == Workspace::FAST_PATH || ws.layout == Workspace::CPU)) {
    // Nothing to build: a pure-Python ModelNew still gets verified.
    mkdir(final_dir.c_str(), 0700);
    std::ofstream(final_dir + "/manifest.json") << "{}";
    CompileResult none;
    none.ok = true;
    none.artifact_dir = final_dir;
    none.summary = "no kernels to compile";
    return none;
  }
  {
    absl::MutexLock l(&mu_);
    ++waiting_;
    auto slot_free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ < max_parallel_; };
    mu_.Await(absl::Condition(&slot_free));
    --waiting_;
    ++in_flight_;
  }
  absl::StatusOr<CompileResult> r = Build(ws, workspace_dir, final_dir);
  {
    absl::MutexLock l(&mu_);
    --in_flight_;
  }
  return r;
}

absl::StatusOr<CompileResult> CompileStage::Build(const ValidatedWorkspace& ws, const std::string& workspace_dir,
                                                  const std::string& final_dir) {
  KR_RETURN_IF_ERROR(MakeDir(cache_dir_, 0700));
  char tmpl[4096];
  std::snprintf(tmpl, sizeof(tmpl), "%s/build-XXXXXX", cache_dir_.c_str());
  if (mkdtemp(tmpl) == nullptr) return ErrnoToStatus(errno, absl::StrCat("mkdtemp ", tmpl));
  const std::string out_dir = tmpl;
  const std::string tmp_dir = out_dir + "/.tmp";
  const std::string root_dir = out_dir + "/.root";
  for (const std::string& d : {tmp_dir, root_dir}) {
    if (absl::Status s = MakeDir(d, 0700); !s.ok()) {
      RemoveTree(out_dir).IgnoreError();
      return s;
    }
  }

  const CompileLimits& lim = config_.compile();
  SpawnOptions opts;
  opts.argv = Command(ws, workspace_dir, out_dir);
  // SandboxConfig.child_env (resolved by the main), then the compiler's own:
  // the toolkit first on PATH, scratch for HOME and TMPDIR, no GPU.
  const std::string path = ChildEnvValue(config_.child_env(), "PATH");
  opts.env = ChildEnvList(config_.child_env(), {{"PATH", CudaHome(config_) + "/bin:" + path},
                                                {"TMPDIR", tmp_dir},
                                                {"HOME", tmp_dir},
                                                {"LC_ALL", "C"},
                                                {"CUDA_VISIBLE_DEVICES", ""}});
  opts.cwd = workspace_dir;
  opts.wall_seconds = OrD(lim.wall_seconds(), 120);
  opts.max_output_bytes = 256 << 10;
  // The compiler's switches (namespaces, root, seccomp, identity) from the
  // role table; the paths and limits of this build below.
  opts.policy = PolicyFor(Role::kCompiler, caps_);
  KrPolicy& p = opts.policy;
  p.writable_dirs = out_dir.c_str();
  p.cpu_seconds = static_cast<long long>(OrD(lim.cpu_seconds(), 120));
  // Python builders import torch (large mappings): RLIMIT_AS only for nvcc/g++.
  if (ws.layout == Workspace::FAST_PATH || ws.layout == Workspace::CPU) {
    p.as_bytes = OrI(lim.memory_bytes(), int64_t{8} << 30);
  } else {
    p.data_bytes = OrI(lim.memory_bytes(), int64_t{8} << 30);
  }
  p.fsize_bytes = OrI(lim.output_bytes(), int64_t{256} << 20);
  // Constructed root (sandbox/contain/root_plan.h): the system, the tool's
  // install, the harness and the workspace, nothing else of the host; the
  // compiler runs as the sandbox identity (nobody).
  std::vector<std::string> ro = ToolPaths(opts.argv[0], path);
  ro.push_back(harness_dir_);
  // SandboxConfig.view.extra_ro_paths (checked when the worker starts:
  // sandbox/filesystem_view.h); missing ones are left out and listed.
  ro.insert(ro.end(), config_.view().extra_ro_paths().begin(), config_.view().extra_ro_paths().end());
  // The search paths the compiler's environment names must exist in its root.
  for (const char* name : {"PYTHONPATH", "CUDA_HOME", "LD_LIBRARY_PATH"}) {
    if (std::string v = ChildEnvValue(config_.child_env(), name); !v.empty()) ro.push_back(v);
  }
  const std::string ro_paths = absl::StrJoin(ro, ":");
  p.root_dir = root_dir.c_str();
  p.ro_paths = ro_paths.c_str();
  p.job_ro_dirs = workspace_dir.c_str();

  absl::StatusOr<SpawnResult> run = RunContained(opts);
  rmdir(root_dir.c_str());  // the root was staged there (an empty dir again); not part of the artifact
  if (!run.ok()) {
    RemoveTree(out_dir).IgnoreError();
    return run.status();
  }
  CompileResult r;
  r.wall_ms = run->status.wall_ms;
  r.cpu_ms = run->status.cpu_ms;
  const std::string output = run->stderr_text + run->stdout_text;
  r.log = Tail(output, 8192);
  // The view the compiler had and the identity it ran as (the child's own
  // steps: from its root's description on), for the log of a failed build.
  const size_t view_at = run->contain_log.rfind("root: filesystem view");
  const std::string sandbox_log =
      CapHead(view_at == std::string::npos ? run->contain_log : run->contain_log.substr(view_at), 3000);
  const int max_diag = lim.max_diagnostics() > 0 ? lim.max_diagnostics() : 20;
  const int max_chars = lim.max_message_chars() > 0 ? lim.max_message_chars() : 400;
  r.diagnostics = ParseDiagnostics(output, workspace_dir, max_diag, max_chars);
  const SuperviseResult& s = run->status;
  if (s.timed_out || s.term_signal == SIGXCPU) {
    r.failure = Verdict::TIMEOUT;
    r.summary = absl::StrCat("compile ran past its limit (", s.timed_out ? "wall" : "CPU", ")");
  } else if (s.term_signal == SIGSYS || s.exit_code == 86) {
    r.failure = Verdict::SANDBOX_VIOLATION;
    r.summary = s.exit_code == 86 ? "compile step: candidate code broke a sandbox rule: " + Tail(run->stderr_text, 300)
                                  : "compile step killed by seccomp (forbidden system call)";
  } else if (s.term_signal == SIGXFSZ) {
    r.failure = Verdict::COMPILE_ERROR;
    r.summary = "compile output exceeded the size limit";
  } else if (s.exit_code != 0 || s.term_signal != 0) {
    r.failure = Verdict::COMPILE_ERROR;
    int errors = 0;
    for (const auto& d : r.diagnostics) errors += d.severity() == "error";
    std::string first;
    for (const auto& d : r.diagnostics) {
      if (d.severity() == "error") {
        first = CompileErrorAt(d.file(), d.line(), d.message());
        break;
      }
    }
    r.summary = CompileFailed(errors, first);
    if (first.empty()) {
      // Python builders report exceptions, not compiler lines.
      size_t last = output.find_last_not_of("\n ");
      size_t start = output.rfind('\n', last == std::string::npos ? 0 : last);
      r.summary += ": " + output.substr(start == std::string::npos ? 0 : start + 1, 300);
    }
  } else {
    if (ws.layout == Workspace::FAST_PATH || ws.layout == Workspace::CPU) {
      std::ofstream(out_dir + "/manifest.json") << "{\"kernels_so\": \"kernels.so\"}";
    }
    Verdict kept;
    for (const CompileDiagnostic& d : r.diagnostics) *kept.add_diagnostics() = d;
    std::ofstream(out_dir + "/" + kDiagnosticsFile, std::ios::binary) << kept.SerializeAsString();
    RemoveTree(tmp_dir).IgnoreError();
    // Atomic publish; a concurrent identical build may have won the race.
    if (rename(out_dir.c_str(), final_dir.c_str()) != 0) RemoveTree(out_dir).IgnoreError();
    r.ok = true;
    r.artifact_dir = final_dir;
    r.summary = absl::StrCat("compiled ", ws.kernel_sources.size(), " source(s)");
    return r;
  }
  r.log = "[compile sandbox]\n" + sandbox_log + "\n[compiler output]\n" + r.log;
  RemoveTree(out_dir).IgnoreError();
  return r;
}

}  // namespace kernelrl::sandbox
