// precompute_baselines: the baseline precompute command for a whole task set.
//
//   precompute_baselines --measurements=FILE.jsonl --set=baseline_cache_dir=DIR [--table=OUT.tsv]
//       [--run_harness --tasks_root=DIR --workers=N --device=cuda|cpu]
//
// Profiler settings come from ProfilerConfig (proto/profiler_config.proto)
// through common/config (--config=FILE, --set=field=VALUE, --print_config),
// as for the sandbox worker's `profiler` field, with one set of defaults (profiler_defaults.cc):
// the cache root (baseline_cache_dir), the harness (harness_python,
// harness_root, time_budget_s) and the analysis the baselines get. The flags
// below name one run's inputs and outputs only.
// The measurements that pay speed-ups come from //sandbox:measure_baselines
// (timing_path "executor"). With --run_harness it first runs the in-process
// Python harness (python3 -m profiler_service.harness.precompute) instead,
// whose entries the sandbox treats as missing (they never pay). Each
// BaselineMeasurement JSON line is analysed with the
// same TimingAnalysis as candidates (BuildBaseline) and stored in the
// BaselineCache. Failed tasks are stored with Baseline.error set and listed.
// A TSV table and a summary go to --table and stdout.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/config.h"
#include "common/file.h"
#include "common/log.h"
#include "common/text.h"
#include "google/protobuf/util/json_util.h"
#include "profiler_service/baseline_cache.h"
#include "profiler_service/judge.h"
#include "profiler_service/profiler_defaults.h"
#include "profiler_service/stats.h"

ABSL_FLAG(std::string, measurements, "", "JSON lines of BaselineMeasurement (harness output).");
ABSL_FLAG(std::string, table, "", "Write the per-task TSV table here.");
ABSL_FLAG(bool, run_harness, false, "Run the Python precompute first (writes --measurements).");
ABSL_FLAG(std::string, tasks_root, "", "KernelBench root (level1/, level2/) for --run_harness.");
ABSL_FLAG(int, workers, 4, "Harness worker processes.");
ABSL_FLAG(std::string, device, "cuda", "cuda or cpu.");

namespace kernelrl {
namespace {

int Run(const ProfilerConfig& config) {
  const std::string path = absl::GetFlag(FLAGS_measurements);
  if (path.empty()) {
    KLOG(ERROR) << "--measurements is required";
    return 2;
  }
  if (absl::GetFlag(FLAGS_run_harness)) {
    const std::string cmd = absl::StrCat(
        "cd ", ShellQuote(config.harness_root().empty() ? "." : config.harness_root()), " && ",
        ShellQuote(config.harness_python()), " -m profiler_service.harness.precompute --tasks_root ",
        ShellQuote(absl::GetFlag(FLAGS_tasks_root)), " --out ", ShellQuote(path), " --workers ",
        absl::GetFlag(FLAGS_workers), " --budget_s ", config.time_budget_s(), " --device ",
        ShellQuote(absl::GetFlag(FLAGS_device)));
    const int rc = std::system(cmd.c_str());
    if (rc != 0) {
      KLOG(WARNING) << "harness exited with " << rc << "; importing what it wrote";
    }
  }
  const BaselineCache cache(config.baseline_cache_dir());
  absl::StatusOr<std::string> measurements = ReadFileToString(path);
  if (!measurements.ok()) {
    KLOG(ERROR) << measurements.status().message();
    return 1;
  }
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = true;  // "worker", "traceback": harness diagnostics.
  std::ofstream table;
  if (!absl::GetFlag(FLAGS_table).empty()) {
    table.open(absl::GetFlag(FLAGS_table));
    table << "task_id\teager_us\tcompiled_us\tcompile_over_eager\teager_rse\tcompiled_rse\teager_n\t"
             "compiled_n\tspeed_of_light_us\ttiming_path\tflags\terror\n";
  }
  std::vector<double> ratios;
  int ok = 0, failed = 0, compiled_failed = 0, compile_faster = 0, rse_ok = 0, timed = 0, paying = 0;
  std::vector<std::string> failures;
  for (absl::string_view line : absl::StrSplit(*measurements, '\n', absl::SkipEmpty())) {
    BaselineMeasurement bm;
    const auto st = google::protobuf::util::JsonStringToMessage(std::string(line), &bm, opts);
    if (!st.ok()) {
      KLOG(ERROR) << "bad line: " << st.ToString();
      failed++;
      continue;
    }
    Baseline b = BuildBaseline(bm, config);
    if (b.task_hash().empty()) b.set_task_hash("unhashed_" + bm.task_id());
    if (b.gpu_model().empty()) b.set_gpu_model("unknown");
    std::string err = bm.error();
    if (err.empty() && !bm.eager().error().empty()) err = bm.eager().error();
    b.set_error(err);
    const auto put = cache.Put(b);
    if (!put.ok()) {
      KLOG(ERROR) << bm.task_id() << ": " << put.message();
    }
    paying += WhyBaselineDoesNotPay(b).empty();
    const bool have_eager = b.eager().median_us() > 0;
    const bool have_compiled = b.compiled().median_us() > 0;
    if (!err.empty() || !have_eager) {
      failed++;
      failures.push_back(absl::StrCat(bm.task_id(), ": ", err.substr(0, 120)));
    } else {
      ok++;
      if (!have_compiled) compiled_failed++;
    }
    std::vector<std::string> flags;
    for (const auto& f : b.eager().flags()) flags.push_back("eager:" + f);
    for (const auto& f : b.compiled().flags()) flags.push_back("compiled:" + f);
    if (have_eager) {
      timed++;
      rse_ok += b.eager().rel_std_error() <= config.target_rel_std_error();
    }
    if (have_compiled) {
      timed++;
      rse_ok += b.compiled().rel_std_error() <= config.target_rel_std_error();
    }
    double ratio = 0;
    if (have_eager && have_compiled) {
      ratio = b.compiled().median_us() / b.eager().median_us();
      ratios.push_back(ratio);
      compile_faster += ratio < 1.0 / 1.05;
    }
    if (table.is_open()) {
      table << absl::StrFormat("%s\t%.2f\t%.2f\t%.3f\t%.4f\t%.4f\t%d\t%d\t%.2f\t%s\t%s\t%s\n", bm.task_id(),
                               b.eager().median_us(), b.compiled().median_us(), ratio,
                               b.eager().rel_std_error(), b.compiled().rel_std_error(), b.eager().samples(),
                               b.compiled().samples(), b.speed_of_light_us(),
                               b.timing_path().empty() ? "in_process"
                                                       : absl::StrCat(b.timing_path(), "/", b.protocol()),
                               absl::StrJoin(flags, ","),
                               err.substr(0, 200));
    }
  }
  double log_sum = 0;
  for (double r : ratios) log_sum += std::log(r);
  std::cout << absl::StrFormat(
      "baselines: %d ok, %d failed (of which compile-only failures: %d among ok); %d pay speed-ups (timed "
      "through the executor path under protocol %d; the rest failed, or were timed in the precompute's own "
      "process or under an older protocol)\n"
      "timed runs with RSE <= %.0f%%: %d / %d\n"
      "torch.compile / eager time: geomean %.3f, median %.3f; compile >5%% faster on %d / %zu tasks\n",
      ok, failed, compiled_failed, paying, kBaselineProtocol, 100 * config.target_rel_std_error(), rse_ok, timed,
      ratios.empty() ? 0.0 : std::exp(log_sum / ratios.size()), Median(ratios), compile_faster,
      ratios.size());
  for (const auto& f : failures) std::cout << "  failed " << f << "\n";
  return 0;
}

}  // namespace
}  // namespace kernelrl

int main(int argc, char** argv) {
  kernelrl::ProfilerConfig config;
  if (std::optional<int> exit_code = kernelrl::StartTool(
          argc, argv, "precompute_baselines", "", "--measurements, --table, --run_harness, --tasks_root, --workers, --device.",
          &config, &kernelrl::WithProfilerDefaults)) {
    return *exit_code;
  }
  return kernelrl::Run(kernelrl::WithProfilerDefaults(config));
}
