#include "common/text.h"
#include "profiler_service/profiler_core.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "profiler_service/judge.h"
#include "profiler_service/profiler_defaults.h"
#include "profiler_service/task_key.h"

namespace kernelrl {
namespace {


absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

ProfilerCore::ProfilerCore(const ProfilerConfig& config, std::string gpu_model, std::string torch_version,
                           MetricsRegistry* metrics)
    : config_(WithProfilerDefaults(config)),
      gpu_model_(std::move(gpu_model)),
      torch_version_(std::move(torch_version)),
      cache_(config_.baseline_cache_dir()),
      profiles_(metrics->AddCounter("kernelrl_profiler_profiles_total", "Profiles judged, by outcome.",
                                    {"outcome"})),
      baseline_lookups_(metrics->AddCounter("kernelrl_profiler_baseline_lookups_total",
                                            "Baseline lookups by result (hit, miss_measured, missing).",
                                            {"result"})),
      reward_(metrics->AddHistogram("kernelrl_profiler_reward", "Reward of judged profiles.", {},
                                    {-1.5, -0.5, 0.5, 1.5, 2.5, 3.5})) {}

BaselineKey ProfilerCore::KeyFor(const Task& task) const {
  // Task.content_hash is TaskHash(...) of the declared device (task_key.h).
  return {task.content_hash(), gpu_model_, torch_version_, InputPolicyHash(DeclaredDevice(task), task.inputs().dtype())};
}

absl::StatusOr<ProfileResult> ProfilerCore::Profile(const v1::ProfileRequest& request) {
  const std::string path = request.artifact_dir() + "/profile_measurement.json";
  absl::StatusOr<std::string> json = ReadFile(path);
  if (!json.ok()) return absl::FailedPreconditionError(absl::StrCat("no harness measurement: ", json.status().message()));
  ProfileMeasurement m;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;
  const auto st = google::protobuf::util::JsonStringToMessage(*json, &m, opts);
  if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", st.ToString()));

  v1::BaselinesRequest breq;
  *breq.add_tasks() = request.task();
  breq.set_cache_only(true);
  const v1::BaselinesResponse bres = Baselines(breq);
  const Baseline* baseline = bres.baselines_size() > 0 ? &bres.baselines(0) : nullptr;
  ProfileResult result = JudgeProfile(m, baseline, request.task(), config_);
  profiles_.Labels({Verdict::Outcome_Name(result.verdict().outcome())}).Increment();
  reward_.Get().Observe(result.verdict().reward());
  return result;
}

v1::BaselinesResponse ProfilerCore::Baselines(const v1::BaselinesRequest& request) {
  v1::BaselinesResponse response;
  for (const Task& task : request.tasks()) {
    if (task.content_hash().empty()) {
      (*response.mutable_missing())[task.id()] = "task has no content_hash";
      continue;
    }
    absl::StatusOr<Baseline> b = cache_.Get(KeyFor(task));
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
    b = MeasureBaseline(task);
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

absl::StatusOr<Baseline> ProfilerCore::MeasureBaseline(const Task& task) {
  // The reference runs in its own process (python precompute), never next to a candidate.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / absl::StrCat("kernelrl_baseline_", getpid(), "_", task.content_hash().substr(0, 16));
  fs::create_directories(dir / "level0");
  std::string name = task.id();
  for (char& c : name) if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  { std::ofstream(dir / "level0" / (name + ".py")) << task.reference_source(); }
  const std::string out = (dir / "b.jsonl").string();
  const std::string device = task.inputs().device().empty() ? "cuda" : task.inputs().device();
  const std::string cmd = absl::StrCat(
      "cd ", ShellQuote(config_.harness_root().empty() ? "." : config_.harness_root()), " && ",
      config_.harness_python(), " -m profiler_service.harness.precompute --levels level0 --workers 1",
      " --tasks_root ", ShellQuote(dir.string()), " --out ", ShellQuote(out), " --device ", ShellQuote(device),
      " --budget_s ", config_.time_budget_s(), " > ", ShellQuote((dir / "log").string()), " 2>&1");
  if (std::system(cmd.c_str()) != 0) return absl::InternalError(absl::StrCat("baseline harness failed; log in ", dir.string()));
  absl::StatusOr<std::string> line = ReadFile(out);
  if (!line.ok()) return line.status();
  BaselineMeasurement bm;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = true;
  const auto st = google::protobuf::util::JsonStringToMessage(line->substr(0, line->find('\n')), &bm, opts);
  if (!st.ok()) return absl::InternalError(absl::StrCat("baseline output: ", st.ToString()));
  Baseline b = BuildBaseline(bm, config_);
  const BaselineKey key = KeyFor(task);
  b.set_task_id(task.id());
  b.set_task_hash(key.task_hash);
  b.set_gpu_model(key.gpu_model);
  b.set_torch_version(key.torch_version);
  b.set_input_policy_hash(key.input_policy_hash);
  if (b.error().empty() && !bm.eager().error().empty()) b.set_error(bm.eager().error());
  if (auto put = cache_.Put(b); !put.ok()) return put;
  fs::remove_all(dir);
  return b;
}

}  // namespace kernelrl
