// measure_baselines: eager and torch.compile baselines of a task set, timed
// through the sandbox's candidate path (Evaluator::MeasureBaseline,
// docs/HARNESS.md "Baselines"): each task's Model, then torch.compile(Model),
// runs in an executor process exactly where a candidate's ModelNew would,
// and the reference process times it with the candidate's protocol. Writes
// one BaselineMeasurement JSON line per task (failures recorded, never
// dropped); profiler_service:precompute_baselines imports them into the cache.
//
//   measure_baselines --tasks_root=DIR --out=FILE.jsonl [--levels=level1,level2] [--only=ids] [--limit=N]
//       [--config=FILE] [--set=field=VALUE ...]
//
// The worker is configured exactly like sandbox_main and sandbox_cli
// (SandboxConfig through common/config); here profiling is on unless the
// config says otherwise (a baseline is measured, not judged). Use the same backend, python, harness and profiler settings
// as the workers whose candidates the baselines are for.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/log.h"
#include "google/protobuf/util/json_util.h"
#include "sandbox/child_env.h"
#include "sandbox/evaluator.h"
#include "sandbox/workspace_files.h"

ABSL_FLAG(std::string, tasks_root, "", "KernelBench-layout root (level1/, level2/ of task .py files)");
ABSL_FLAG(std::string, levels, "level1,level2", "comma-separated level directories under --tasks_root");
ABSL_FLAG(std::string, only, "", "comma-separated task ids (level1/19_ReLU) to measure, in this order");
ABSL_FLAG(int, limit, 0, "at most this many tasks (0 = all)");
ABSL_FLAG(std::string, out, "", "BaselineMeasurement JSON lines, one per task");

namespace kernelrl::sandbox {
namespace {

constexpr char kDefaults[] = "enable_profiling: true";

// (id, path) in harness/tasks.py's list_tasks order: numeric prefix, then name.
std::vector<std::pair<std::string, std::string>> ListTasks(const std::string& root, const std::string& levels) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::vector<std::string> level_list = absl::StrSplit(levels, ',', absl::SkipEmpty());
  for (const std::string& level : level_list) {
    std::error_code ec;
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(root + "/" + level, ec)) {
      const std::string name = e.path().filename().string();
      if (name.size() > 3 && name.substr(name.size() - 3) == ".py") files.push_back(name);
    }
    const auto order = [](const std::string& f) {
      const std::string head = f.substr(0, f.find('_'));
      const bool numeric = !head.empty() && std::all_of(head.begin(), head.end(), ::isdigit);
      return std::make_pair(numeric ? std::stol(head) : (1L << 30), f);
    };
    std::sort(files.begin(), files.end(), [&](const std::string& a, const std::string& b) { return order(a) < order(b); });
    for (const std::string& f : files) out.emplace_back(level + "/" + f.substr(0, f.size() - 3), root + "/" + level + "/" + f);
  }
  return out;
}

int Run(const SandboxConfig& config) {
  const std::string out_path = absl::GetFlag(FLAGS_out);
  if (out_path.empty() || absl::GetFlag(FLAGS_tasks_root).empty()) {
    KLOG(ERROR) << "measure_baselines: --tasks_root and --out are required";
    return 2;
  }
  auto tasks = ListTasks(absl::GetFlag(FLAGS_tasks_root), absl::GetFlag(FLAGS_levels));
  if (!absl::GetFlag(FLAGS_only).empty()) {
    // Those tasks, in the order given (a run cut by its wall keeps the first).
    const std::vector<std::string> keep = absl::StrSplit(absl::GetFlag(FLAGS_only), ',', absl::SkipEmpty());
    std::vector<std::pair<std::string, std::string>> kept;
    for (const std::string& id : keep) {
      for (const auto& t : tasks) {
        if (t.first == id) kept.push_back(t);
      }
    }
    tasks = std::move(kept);
  }
  if (absl::GetFlag(FLAGS_limit) > 0 && static_cast<int>(tasks.size()) > absl::GetFlag(FLAGS_limit)) {
    tasks.resize(absl::GetFlag(FLAGS_limit));
  }
  std::ofstream out(out_path);
  if (!out) {
    KLOG(ERROR) << "measure_baselines: cannot write " << out_path;
    return 2;
  }
  absl::StatusOr<std::unique_ptr<Evaluator>> evaluator = Evaluator::Create(config);
  if (!evaluator.ok()) {
    KLOG(ERROR) << "measure_baselines: worker did not start: " << evaluator.status().message();
    return 1;
  }
  google::protobuf::util::JsonPrintOptions json;
  json.preserve_proto_field_names = true;
  const double t0 = MonotonicMs();
  int ok = 0;
  for (const auto& [id, path] : tasks) {
    v1::BaselineMeasurement bm;
    absl::StatusOr<Task> task = ReadTaskFile(path, id);
    if (!task.ok()) {
      bm.set_task_id(id);
      bm.set_timing_path("executor");
      bm.set_error(std::string(task.status().message()));
    } else {
      bm = (*evaluator)->MeasureBaseline(*task);
    }
    std::string line;
    if (auto s = google::protobuf::util::MessageToJsonString(bm, &line, json); !s.ok()) {
      KLOG(ERROR) << id << ": " << s.ToString();
      continue;
    }
    out << line << "\n" << std::flush;
    ok += bm.error().empty();
    std::printf("[%6.1fs] %s %s eager n=%d compiled n=%d%s\n", (MonotonicMs() - t0) / 1e3, id.c_str(),
                bm.error().empty() ? "ok" : ("ERROR " + bm.error().substr(0, 100)).c_str(), bm.eager().samples_size(),
                bm.compiled().samples_size(),
                bm.compiled().error().empty() ? "" : (" (" + bm.compiled().error().substr(0, 100) + ")").c_str());
    std::fflush(stdout);
  }
  std::printf("measure_baselines: %d of %zu tasks with an eager baseline (timing_path executor)\n", ok, tasks.size());
  return 0;
}

}  // namespace
}  // namespace kernelrl::sandbox

int main(int argc, char** argv) {
  using namespace kernelrl;
  sandbox::SandboxConfig config;
  if (std::optional<int> exit_code = StartTool(argc, argv, "measure_baselines", sandbox::kDefaults,
                                               "--tasks_root --out [--levels --only --limit].", &config,
                                               &sandbox::WithDefaults)) {
    return *exit_code;
  }
  sandbox::ResolveChildEnvironmentFromHost(&config);
  return sandbox::Run(config);
}
