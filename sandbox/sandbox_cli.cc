// sandbox_cli: runs the Evaluator on local files, without gRPC. Used on the
// GPU machine (tools/device_sandbox.sh) and by hand:
//
//   sandbox_cli --task=level1/19_ReLU.py --workspace=sandbox/solutions/level1/19_ReLU
//   sandbox_cli --suite=manifest.txt --json_out=verdicts.jsonl
//   sandbox_cli --suite=... --set=enable_profiling=true --set=baseline_dir=DIR
//   sandbox_cli --suite=... --concurrency=8   # as a learning run's actors submit
//
// The worker is configured exactly like sandbox_main: SandboxConfig
// (proto/sandbox_config.proto) through common/config (--config=FILE,
// --config_text, --set=field.path=VALUE, --print_config); its defaults live
// in sandbox::WithDefaults only. The flags below name one run's inputs and
// outputs, never a worker setting.
// A suite line is "<label> <task file> <workspace dir> <expected outcome>
// [verify]": the optional fifth word asks for correctness alone (the request's
// skip_profile, as the agent's Verify tool sends it).
// Prints one row per evaluation as it finishes, then the whole run's wall and
// each stage's p50 over the evaluations; exits non-zero if any outcome differs
// from the expectation (2: bad configuration or unreadable suite).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/config.h"
#include "common/file.h"
#include "common/json.h"
#include "common/log.h"
#include "google/protobuf/util/json_util.h"
#include "profiler_service/stats.h"
#include "sandbox/child_env.h"
#include "sandbox/evaluator.h"
#include "sandbox/workspace_files.h"

ABSL_FLAG(std::string, task, "", "KernelBench task file");
ABSL_FLAG(std::string, workspace, "", "workspace directory");
ABSL_FLAG(std::string, expect, "", "expected outcome name");
ABSL_FLAG(std::string, suite, "", "suite manifest (see header)");
ABSL_FLAG(std::string, json_out, "", "append each Verdict as a JSON line here");
ABSL_FLAG(int, repeat, 1, "evaluate each suite entry this many times");
ABSL_FLAG(int, concurrency, 1, "evaluations in flight at once (each from its own thread)");

namespace {

struct Entry {
  std::string label, task, workspace, expect;
  bool verify_only = false;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace kernelrl;
  using namespace kernelrl::sandbox;
  SandboxConfig config;
  if (std::optional<int> exit_code = StartTool(argc, argv, "sandbox_cli", "",
                                               "--task --workspace --expect | --suite; --json_out, --repeat, --concurrency.", &config,
                                               &WithDefaults)) {
    return *exit_code;
  }
  std::vector<Entry> entries;
  if (!absl::GetFlag(FLAGS_suite).empty()) {
    absl::StatusOr<std::string> suite = ReadFileToString(absl::GetFlag(FLAGS_suite));
    if (!suite.ok()) {
      KLOG(ERROR) << "sandbox_cli: suite: " << suite.status().message();
      return 2;
    }
    for (absl::string_view line : absl::StrSplit(*suite, '\n')) {
      if (line.empty() || line[0] == '#') continue;
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() < 4) continue;
      entries.push_back({f[0], f[1], f[2], f[3], f.size() > 4 && f[4] == "verify"});
    }
  } else {
    entries.push_back({"candidate", absl::GetFlag(FLAGS_task), absl::GetFlag(FLAGS_workspace), absl::GetFlag(FLAGS_expect)});
  }
  sandbox::ResolveChildEnvironmentFromHost(&config);
  auto evaluator = sandbox::Evaluator::Create(config);
  if (!evaluator.ok()) {
    KLOG(ERROR) << "sandbox_cli: " << evaluator.status().message();
    return 2;
  }
  std::ofstream json;
  if (!absl::GetFlag(FLAGS_json_out).empty()) json.open(absl::GetFlag(FLAGS_json_out), std::ios::app);
  std::vector<const Entry*> work;
  for (int rep = 0; rep < absl::GetFlag(FLAGS_repeat); ++rep) {
    for (const Entry& e : entries) work.push_back(&e);
  }
  std::printf("%-34s %-18s %-18s %4s %9s %9s %8s %6s %7s %7s  %s\n", "label", "expected", "got", "ok", "compile",
              "verify", "profile", "reward", "x_eager", "x_comp", "summary");
  absl::Mutex mu;  // the rows, the JSON file and the tallies below
  int mismatches = 0;
  std::map<std::string, std::vector<double>> stage_ms;  // "<stage> (<profiled|verify>)" -> wall per evaluation
  std::atomic<size_t> next{0};
  auto evaluate = [&]() {
    for (size_t i; (i = next.fetch_add(1)) < work.size();) {
      const Entry& e = *work[i];
      auto task = sandbox::ReadTaskFile(e.task, e.label);
      auto ws = sandbox::ReadWorkspaceDir(e.workspace);
      if (!task.ok() || !ws.ok()) {
        absl::MutexLock l(&mu);
        std::printf("%-34s cannot read inputs: %s %s\n", e.label.c_str(), std::string(task.status().message()).c_str(),
                    std::string(ws.status().message()).c_str());
        ++mismatches;
        continue;
      }
      EvaluateRequest req;
      *req.mutable_task() = *task;
      *req.mutable_workspace() = *ws;
      req.set_request_id(e.label);
      req.set_skip_profile(e.verify_only);
      Verdict v = (*evaluator)->Evaluate(req);
      double compile_ms = 0, verify_ms = 0, profile_ms = 0;
      for (const auto& s : v.stages()) {
        if (s.stage() == "compile") compile_ms = s.wall_ms();
        if (s.stage() == "verify") verify_ms = s.wall_ms();
        if (s.stage() == "profile") profile_ms = s.wall_ms();
      }
      const std::string got = Verdict::Outcome_Name(v.outcome());
      const bool ok = e.expect.empty() || e.expect == got;
      std::string summary = v.summary().substr(0, 110);
      for (char& c : summary) if (c == '\n') c = ' ';
      absl::MutexLock l(&mu);
      mismatches += !ok;
      for (const auto& s : v.stages()) {
        stage_ms[s.stage() + (e.verify_only ? " (verify only)" : " (profiled)")].push_back(s.wall_ms());
      }
      std::printf("%-34s %-18s %-18s %4s %9.0f %9.0f %8.0f %6.0f %7.3f %7.3f  %s\n", e.label.c_str(),
                  e.expect.c_str(), got.c_str(), ok ? "yes" : "NO", compile_ms, verify_ms, profile_ms, v.reward(),
                  v.speedup_vs_eager(), v.speedup_vs_compile(), summary.c_str());
      std::fflush(stdout);
      if (json.is_open()) {
        std::string text;
        google::protobuf::util::JsonPrintOptions opts;
        opts.preserve_proto_field_names = true;
        (void)google::protobuf::util::MessageToJsonString(v, &text, opts);
        const Json line = Json::object(
            {{"label", e.label}, {"expected", e.expect}, {"verdict", ParseJson(text).value_or(Json(text))}});
        json << DumpJson(line) << "\n";
        json.flush();
      }
    }
  };
  const int concurrency = std::max(1, absl::GetFlag(FLAGS_concurrency));
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) threads.emplace_back(evaluate);
  for (std::thread& t : threads) t.join();
  const double wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("run: %zu evaluations in %.1f s at concurrency %d (%.2f a second)\n", work.size(), wall_s,
              concurrency, wall_s > 0 ? work.size() / wall_s : 0.0);
  for (const auto& [stage, ms] : stage_ms) {
    std::printf("stage %-28s n %3zu p50 %8.0f ms\n", stage.c_str(), ms.size(), Median(ms));
  }
  auto info = (*evaluator)->Info();
  std::printf("serving=%s missing_isolation=[%s] precision=%s mismatches=%d\n",
              info.serving ? "yes" : "NO", info.missing_isolation.c_str(), info.precision.c_str(), mismatches);
  return mismatches == 0 && info.serving ? 0 : 1;
}
