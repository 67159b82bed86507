// precompute_baselines: the baseline precompute command for a whole task set.
//
//   precompute_baselines --measurements=FILE.jsonl --cache_dir=DIR [--table=OUT.tsv]
//       [--run_harness --tasks_root=DIR --harness_root=REPO --workers=N --budget_s=S]
//
// With --run_harness it first runs the Python harness
// (python3 -m profiler_service.harness.precompute), which writes one
// BaselineMeasurement JSON line per task; then every line is analysed with the
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

#include "common/text.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"
#include "profiler_service/baseline_cache.h"
#include "profiler_service/judge.h"
#include "profiler_service/profiler_defaults.h"
#include "profiler_service/stats.h"

ABSL_FLAG(std::string, measurements, "", "JSON lines of BaselineMeasurement (harness output).");
ABSL_FLAG(std::string, cache_dir, "", "Baseline cache root.");
ABSL_FLAG(std::string, table, "", "Write the per-task TSV table here.");
ABSL_FLAG(bool, run_harness, false, "Run the Python precompute first (writes --measurements).");
ABSL_FLAG(std::string, tasks_root, "", "KernelBench root (level1/, level2/) for --run_harness.");
ABSL_FLAG(std::string, harness_root, ".", "Repository root (PYTHONPATH) for --run_harness.");
ABSL_FLAG(std::string, python, "python3", "Python for --run_harness.");
ABSL_FLAG(int, workers, 4, "Harness worker processes.");
ABSL_FLAG(double, budget_s, 0.5, "Time budget per timed callable per task, seconds.");
ABSL_FLAG(std::string, device, "cuda", "cuda or cpu.");

namespace kernelrl {
namespace {


int Run() {
  const std::string path = absl::GetFlag(FLAGS_measurements);
  if (path.empty() || absl::GetFlag(FLAGS_cache_dir).empty()) {
    std::cerr << "--measurements and --cache_dir are required\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_run_harness)) {
    const std::string cmd = absl::StrCat(
        "cd ", ShellQuote(absl::GetFlag(FLAGS_harness_root)), " && ", ShellQuote(absl::GetFlag(FLAGS_python)),
        " -m profiler_service.harness.precompute --tasks_root ", ShellQuote(absl::GetFlag(FLAGS_tasks_root)),
        " --out ", ShellQuote(path), " --workers ", absl::GetFlag(FLAGS_workers),
        " --budget_s ", absl::GetFlag(FLAGS_budget_s), " --device ", ShellQuote(absl::GetFlag(FLAGS_device)));
    const int rc = std::system(cmd.c_str());
    if (rc != 0) std::cerr << "harness exited with " << rc << "; importing what it wrote\n";
  }
  const ProfilerConfig config = WithProfilerDefaults(ProfilerConfig());
  const BaselineCache cache(absl::GetFlag(FLAGS_cache_dir));
  std::ifstream in(path);
  if (!in) {
    std::cerr << "cannot read " << path << "\n";
    return 1;
  }
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = true;  // "worker", "traceback": harness diagnostics.
  std::ofstream table;
  if (!absl::GetFlag(FLAGS_table).empty()) {
    table.open(absl::GetFlag(FLAGS_table));
    table << "task_id\teager_us\tcompiled_us\tcompile_over_eager\teager_rse\tcompiled_rse\teager_n\t"
             "compiled_n\tspeed_of_light_us\tflags\terror\n";
  }
  std::vector<double> ratios;
  int ok = 0, failed = 0, compiled_failed = 0, compile_faster = 0, rse_ok = 0, timed = 0;
  std::vector<std::string> failures;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    BaselineMeasurement bm;
    const auto st = google::protobuf::util::JsonStringToMessage(line, &bm, opts);
    if (!st.ok()) {
      std::cerr << "bad line: " << st.ToString() << "\n";
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
    if (!put.ok()) std::cerr << bm.task_id() << ": " << put << "\n";
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
      table << absl::StrFormat("%s\t%.2f\t%.2f\t%.3f\t%.4f\t%.4f\t%d\t%d\t%.2f\t%s\t%s\n", bm.task_id(),
                               b.eager().median_us(), b.compiled().median_us(), ratio,
                               b.eager().rel_std_error(), b.compiled().rel_std_error(), b.eager().samples(),
                               b.compiled().samples(), b.speed_of_light_us(), absl::StrJoin(flags, ","),
                               err.substr(0, 200));
    }
  }
  double log_sum = 0;
  for (double r : ratios) log_sum += std::log(r);
  std::cout << absl::StrFormat(
      "baselines: %d ok, %d failed (of which compile-only failures: %d among ok)\n"
      "timed runs with RSE <= %.0f%%: %d / %d\n"
      "torch.compile / eager time: geomean %.3f, median %.3f; compile >5%% faster on %d / %zu tasks\n",
      ok, failed, compiled_failed, 100 * config.target_rel_std_error(), rse_ok, timed,
      ratios.empty() ? 0.0 : std::exp(log_sum / ratios.size()), Median(ratios), compile_faster,
      ratios.size());
  for (const auto& f : failures) std::cout << "  failed " << f << "\n";
  return 0;
}

}  // namespace
}  // namespace kernelrl

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kernelrl::Run();
}
