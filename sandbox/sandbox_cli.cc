// sandbox_cli: runs the Evaluator on local files, without gRPC. Used on the
// GPU machine (tools/device_sandbox.sh) and by hand:
//
//   sandbox_cli --task=level1/19_ReLU.py --workspace=sandbox/solutions/level1/19_ReLU
//   sandbox_cli --suite=manifest.txt --json_out=verdicts.jsonl
//   sandbox_cli --suite=... --profile --baseline_dir=DIR [--kprof_lib=libkprof.so]
//
// A suite line is "<label> <task file> <workspace dir> <expected outcome>".
// Prints one row per evaluation and exits non-zero if any outcome differs
// from the expectation.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "sandbox/evaluator.h"
#include "sandbox/workspace_files.h"

ABSL_FLAG(std::string, backend, "cuda", "cuda or cpu");
ABSL_FLAG(std::string, python, "python3", "Python with torch (the trusted harness)");
ABSL_FLAG(std::string, harness_dir, "sandbox/harness", "directory of zygote.py");
ABSL_FLAG(std::string, contain_lib, "", "libkernelrl_contain.so");
ABSL_FLAG(std::string, work_root, "", "scratch root (default $TMPDIR/kernelrl-sandbox-<pid>)");
ABSL_FLAG(std::string, task, "", "KernelBench task file");
ABSL_FLAG(std::string, workspace, "", "workspace directory");
ABSL_FLAG(std::string, expect, "", "expected outcome name");
ABSL_FLAG(std::string, suite, "", "suite manifest (see header)");
ABSL_FLAG(std::string, json_out, "", "append each Verdict as a JSON line here");
ABSL_FLAG(int, repeat, 1, "evaluate each suite entry this many times");
ABSL_FLAG(double, wall_seconds, 0, "verify wall limit (0 = default)");
ABSL_FLAG(int64_t, resident_memory_mib, 0,
          "host-memory cap of the candidate's process tree, MiB (0 = default 16 GiB, -1 = none)");
ABSL_FLAG(bool, profile, false, "time verified candidates and reward them by speed-up (profile stage)");
ABSL_FLAG(std::string, baseline_dir, "", "baseline cache root (profiler_service:precompute_baselines output)");
ABSL_FLAG(std::string, kprof_lib, "", "libkprof.so (CUPTI recorder); default: runfiles or $KERNELRL_KPROF_LIB");
ABSL_FLAG(std::string, profiler_root, "", "directory holding profiler_service/harness (default: next to harness_dir)");
ABSL_FLAG(double, profile_budget_s, 0, "timing budget per candidate, seconds (0 = ProfilerConfig default)");

namespace {

struct Entry {
  std::string label, task, workspace, expect;
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using namespace kernelrl;
  using namespace kernelrl::sandbox;
  SandboxConfig config;
  config.set_backend(absl::GetFlag(FLAGS_backend));
  config.set_python(absl::GetFlag(FLAGS_python));
  config.set_harness_dir(absl::GetFlag(FLAGS_harness_dir));
  config.set_contain_lib(absl::GetFlag(FLAGS_contain_lib));
  config.set_work_root(absl::GetFlag(FLAGS_work_root));
  if (absl::GetFlag(FLAGS_wall_seconds) > 0) config.mutable_verify()->set_wall_seconds(absl::GetFlag(FLAGS_wall_seconds));
  if (const int64_t mib = absl::GetFlag(FLAGS_resident_memory_mib); mib != 0) {
    config.mutable_verify()->set_resident_memory_bytes(mib > 0 ? mib << 20 : -1);
  }
  config.set_enable_profiling(absl::GetFlag(FLAGS_profile));
  config.set_baseline_dir(absl::GetFlag(FLAGS_baseline_dir));
  config.set_kprof_lib(absl::GetFlag(FLAGS_kprof_lib));
  config.set_profiler_root(absl::GetFlag(FLAGS_profiler_root));
  config.mutable_profiler()->set_time_budget_s(absl::GetFlag(FLAGS_profile_budget_s));
  std::vector<Entry> entries;
  if (!absl::GetFlag(FLAGS_suite).empty()) {
    std::ifstream in(absl::GetFlag(FLAGS_suite));
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() < 4) continue;
      entries.push_back({f[0], f[1], f[2], f[3]});
    }
  } else {
    entries.push_back({"candidate", absl::GetFlag(FLAGS_task), absl::GetFlag(FLAGS_workspace), absl::GetFlag(FLAGS_expect)});
  }
  auto evaluator = sandbox::Evaluator::Create(config);
  if (!evaluator.ok()) {
    std::fprintf(stderr, "sandbox_cli: %s\n", std::string(evaluator.status().message()).c_str());
    return 2;
  }
  std::ofstream json;
  if (!absl::GetFlag(FLAGS_json_out).empty()) json.open(absl::GetFlag(FLAGS_json_out), std::ios::app);
  int mismatches = 0;
  std::printf("%-34s %-18s %-18s %4s %9s %9s %8s %6s %7s %7s  %s\n", "label", "expected", "got", "ok", "compile",
              "verify", "profile", "reward", "x_eager", "x_comp", "summary");
  for (int rep = 0; rep < absl::GetFlag(FLAGS_repeat); ++rep) {
    for (const Entry& e : entries) {
      auto task = sandbox::ReadTaskFile(e.task, e.label);
      auto ws = sandbox::ReadWorkspaceDir(e.workspace);
      if (!task.ok() || !ws.ok()) {
        std::printf("%-34s cannot read inputs: %s %s\n", e.label.c_str(), std::string(task.status().message()).c_str(),
                    std::string(ws.status().message()).c_str());
        ++mismatches;
        continue;
      }
      EvaluateRequest req;
      *req.mutable_task() = *task;
      *req.mutable_workspace() = *ws;
      req.set_request_id(e.label);
      Verdict v = (*evaluator)->Evaluate(req);
      double compile_ms = 0, verify_ms = 0, profile_ms = 0;
      for (const auto& s : v.stages()) {
        if (s.stage() == "compile") compile_ms = s.wall_ms();
        if (s.stage() == "verify") verify_ms = s.wall_ms();
        if (s.stage() == "profile") profile_ms = s.wall_ms();
      }
      const std::string got = Verdict::Outcome_Name(v.outcome());
      const bool ok = e.expect.empty() || e.expect == got;
      mismatches += !ok;
      std::string summary = v.summary().substr(0, 110);
      for (char& c : summary) if (c == '\n') c = ' ';
      std::printf("%-34s %-18s %-18s %4s %9.0f %9.0f %8.0f %6.0f %7.3f %7.3f  %s\n", e.label.c_str(),
                  e.expect.c_str(), got.c_str(), ok ? "yes" : "NO", compile_ms, verify_ms, profile_ms, v.reward(),
                  v.speedup_vs_eager(), v.speedup_vs_compile(), summary.c_str());
      std::fflush(stdout);
      if (json.is_open()) {
        std::string text;
        google::protobuf::util::JsonPrintOptions opts;
        opts.preserve_proto_field_names = true;
        (void)google::protobuf::util::MessageToJsonString(v, &text, opts);
        json << "{\"label\":\"" << e.label << "\",\"expected\":\"" << e.expect << "\",\"verdict\":" << text << "}\n";
        json.flush();
      }
    }
  }
  auto info = (*evaluator)->Info();
  std::printf("serving=%s missing_isolation=[%s] mismatches=%d\n", info.serving ? "yes" : "NO",
              info.missing_isolation.c_str(), mismatches);
  return mismatches == 0 && info.serving ? 0 : 1;
}
