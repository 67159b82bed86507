#include "profiler_service/profiler_core.h"

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/text.h"
#include "google/protobuf/util/json_util.h"
#include "profiler_service/judge.h"
#include "profiler_service/profiler_defaults.h"
#include "profiler_service/task_key.h"

namespace kernelrl {

ProfilerCore::ProfilerCore(const ProfilerConfig& config, std::string gpu_model, std::string torch_version,
                           MetricsRegistry* metrics)
    : config_(WithProfilerDefaults(config)),
      gpu_model_(std::move(gpu_model)),
      torch_version_(std::move(torch_version)),
      cache_(config_.baseline_cache_dir()),
      baseline_lookups_(metrics->AddCounter("kernelrl_profiler_baseline_lookups_total",
                                            "Baseline lookups by result (hit, miss_measured, missing).",
                                            {"result"})) {}

BaselineKey ProfilerCore::KeyFor(const Task& task) const {
  // The same key the sandbox's profile stage reads (task_key.h), for the
  // device the task declares.
  return BaselineKeyFor(task, DeclaredDevice(task), gpu_model_, torch_version_);
}

v1::BaselinesResponse ProfilerCore::Baselines(const v1::BaselinesRequest& request) {
  v1::BaselinesResponse response;
  for (const Task& task : request.tasks()) {
    if (task.reference_source().empty()) {
      (*response.mutable_missing())[task.id()] = "task has no reference_source";
      continue;
    }
    const BaselineKey key = KeyFor(task);
    absl::StatusOr<Baseline> b = cache_.Get(key);
    if (b.ok() && b->error().empty()) {
      baseline_lookups_.Labels({"hit"}).Increment();
      *response.add_baselines() = *b;
      continue;
    }
    if (request.cache_only()) {
      baseline_lookups_.Labels({"missing"}).Increment();
      (*response.mutable_missing())[task.id()] = b.ok() ? b->error() : std::string(b.status().message());
      continue;
    }
    b = MeasureBaseline(task, key);
    if (!b.ok() || !b->error().empty()) {
      baseline_lookups_.Labels({"missing"}).Increment();
      (*response.mutable_missing())[task.id()] = b.ok() ? b->error() : std::string(b.status().message());
      continue;
    }
    baseline_lookups_.Labels({"miss_measured"}).Increment();
    *response.add_baselines() = *b;
  }
  return response;
}

absl::StatusOr<Baseline> ProfilerCore::MeasureBaseline(const Task& task, const BaselineKey& key) {
  // The reference runs in its own process (python precompute), never next to a candidate.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / absl::StrCat("kernelrl_baseline_", getpid(), "_",
                                                                key.task_hash.substr(0, 16));
  fs::create_directories(dir / "level0");
  std::string name = task.id();
  for (char& c : name) if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  if (absl::Status s = WriteFileAtomically((dir / "level0" / (name + ".py")).string(), task.reference_source());
      !s.ok()) {
    return s;
  }
  const std::string out = (dir / "b.jsonl").string();
  const std::string cmd = absl::StrCat(
      "cd ", ShellQuote(config_.harness_root().empty() ? "." : config_.harness_root()), " && ",
      config_.harness_python(), " -m profiler_service.harness.precompute --levels level0 --workers 1",
      " --tasks_root ", ShellQuote(dir.string()), " --out ", ShellQuote(out), " --device ",
      ShellQuote(DeclaredDevice(task)), " --budget_s ", config_.time_budget_s(), " > ",
      ShellQuote((dir / "log").string()), " 2>&1");
  if (std::system(cmd.c_str()) != 0) return absl::InternalError(absl::StrCat("baseline harness failed; log in ", dir.string()));
  absl::StatusOr<std::string> line = ReadFileToString(out);
  if (!line.ok()) return line.status();
  BaselineMeasurement bm;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = true;
  const auto st = google::protobuf::util::JsonStringToMessage(line->substr(0, line->find('\n')), &bm, opts);
  if (!st.ok()) return absl::InternalError(absl::StrCat("baseline output: ", st.ToString()));
  Baseline b = BuildBaseline(bm, config_);
  b.set_task_id(task.id());
  b.set_task_hash(key.task_hash);
  b.set_gpu_model(key.gpu_model);
  b.set_torch_version(key.torch_version);
  b.set_input_policy_hash(key.input_policy_hash);
  if (b.error().empty() && !bm.eager().error().empty()) b.set_error(bm.eager().error());
  if (auto put = cache_.Put(b); !put.ok()) return put;
  RemoveTree(dir.string()).IgnoreError();  // scratch under /tmp: best effort, the baseline is stored
  return b;
}

}  // namespace kernelrl
