// op_probe: how well a code model reads its task's ops (tools/codemodel/op_probe.h).
//
//   op_probe --config=configs/learn/family.textproto ... --checkpoint=DIR --tasks=A.jsonl[,B.jsonl]
//            [--per_task=2] [--seed=7] [--device=cpu|cuda] [--kernel_device=cuda|cpu]
//   op_probe ... --checkpoint=DIR --trajectories=X.pb[,DIR]
//
// For each task file (any split: the trajectories stay in memory and train nothing), the
// engineer's episodes on its tasks as corpus_gen makes them (the config's prompts and
// engineer), each read by the model teacher-forced. Prints one JSON object, by task file, and a
// line a file on stderr ("op probe FILE: PLACE RIGHT/TOTAL ...").
// --trajectories: rollouts (Trajectory .pb files, or the *.pb of a directory, e.g. an
// evaluation's trajectories/) read the same way, each on its own: whether the model would write
// the op places the rollout wrote, and where it first would not write the rollout's token (for
// another policy's greedy rollout, where the two greedy texts part). Under "trajectories", and a
// line each on stderr. Both give the model's odds for each design slot's options at the first
// plan ("design_odds", by task; for the task files a line a task on stderr).
#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "agent/policy/policy_factory.h"
#include "common/config.h"
#include "common/file.h"
#include "common/json.h"
#include "learner/model.h"
#include "learner/rl/job_config.h"
#include "proto/cli_config.pb.h"
#include "tools/codemodel/corpus.h"
#include "tools/codemodel/op_probe.h"

ABSL_FLAG(std::string, checkpoint, "", "the model (config.json, model.safetensors, tokenizer.json)");
ABSL_FLAG(std::string, tasks, "", "comma-separated task files");
ABSL_FLAG(std::string, trajectories, "", "comma-separated Trajectory .pb files or directories of them");
ABSL_FLAG(int, per_task, 2, "episodes per task");
ABSL_FLAG(uint64_t, seed, 7, "seed of the episodes' designs, faults and phrasings");
ABSL_FLAG(std::string, device, "cpu", "where the model runs: cpu (fp32) or cuda (bf16)");
ABSL_FLAG(std::string, kernel_device, "cuda", "the episodes' kernels: cuda (.cu) or cpu (.cc)");
ABSL_FLAG(int, threads, 0, "CPU intra-op threads (0 = LibTorch's default)");

namespace kernelrl::codemodel {
namespace {

// --trajectories, each file or each *.pb of a directory (sorted), probed on its own.
absl::StatusOr<Json> ProbeRollouts(const learner::Transformer& model, const agent::Tokenizer& tokenizer) {
  std::vector<std::string> files;
  for (absl::string_view arg : absl::StrSplit(absl::GetFlag(FLAGS_trajectories), ',', absl::SkipEmpty())) {
    const std::filesystem::path path{std::string(arg)};
    if (!std::filesystem::is_directory(path)) {
      files.push_back(path.string());
      continue;
    }
    std::vector<std::string> in_dir;
    for (const auto& e : std::filesystem::directory_iterator(path)) {
      if (e.path().extension() == ".pb") in_dir.push_back(e.path().string());
    }
    if (in_dir.empty()) return absl::NotFoundError(absl::StrCat(path.string(), ": no .pb file"));
    std::sort(in_dir.begin(), in_dir.end());
    files.insert(files.end(), in_dir.begin(), in_dir.end());
  }
  Json out = Json::array();
  for (const std::string& file : files) {
    auto bytes = ReadFileToString(file);
    if (!bytes.ok()) return bytes.status();
    v1::Trajectory t;
    if (!t.ParseFromString(*bytes)) return absl::InvalidArgumentError(absl::StrCat(file, ": not a Trajectory"));
    auto probe = ProbeTrajectory(model, tokenizer, t);
    if (!probe.ok()) return probe.status();
    const Divergence& d = probe->divergence;
    Json one = OpProbeJson(probe->places);
    one["file"] = file;
    one["trajectory_id"] = t.id();
    one["task_id"] = t.task_id();
    one["reward"] = t.reward();
    one["divergence"] = Json::object({{"model_tokens", Json(d.model_tokens)},
                                      {"token", Json(d.token)},
                                      {"model_token", Json(d.model_token)},
                                      {"written", Json(d.written)},
                                      {"predicted", Json(d.predicted)},
                                      {"margin", Json(d.margin)},
                                      {"before", Json(d.before)}});
    int64_t right = 0, total = 0;
    double logprob = 0;
    for (const auto& [composition, c] : probe->places.by_composition) {
      right += c.right;
      total += c.total;
      logprob += c.logprob;
    }
    std::string line = absl::StrCat("op probe ", t.id(), " (reward ", t.reward(), "): op places ", right, "/", total,
                                    ", mean log-probability ", total > 0 ? logprob / total : 0.0, "; ");
    if (d.token < 0) {
      absl::StrAppend(&line, "the model's most likely token at every one of its ", d.model_tokens, " tokens");
    } else {
      absl::StrAppend(&line, "parts at model token ", d.model_token, " of ", d.model_tokens, ": wrote ",
                      DumpJson(Json(d.written)), ", the model ", DumpJson(Json(d.predicted)), " by ", d.margin,
                      " nats, after ", DumpJson(Json(d.before.size() > 60 ? d.before.substr(d.before.size() - 60) : d.before)));
    }
    std::fprintf(stderr, "%s\n", line.c_str());
    out.push_back(std::move(one));
  }
  return out;
}

absl::Status Run(const v1::LearnConfig& config) {
  const std::string dir = absl::GetFlag(FLAGS_checkpoint);
  if (dir.empty() || (absl::GetFlag(FLAGS_tasks).empty() && absl::GetFlag(FLAGS_trajectories).empty())) {
    return absl::InvalidArgumentError("--checkpoint and --tasks or --trajectories are required");
  }
  if (const int t = absl::GetFlag(FLAGS_threads); t > 0) at::set_num_threads(t);
  auto tokenizer = agent::Tokenizer::Load(dir + "/tokenizer.json");
  if (!tokenizer.ok()) return tokenizer.status();
  learner::ModelOptions mo;
  const bool cuda = absl::GetFlag(FLAGS_device) == "cuda";
  mo.device = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  mo.dtype = cuda ? at::kBFloat16 : at::kFloat;
  auto model = learner::Transformer::Load(dir, learner::Head::kLanguageModel, mo);
  if (!model.ok()) return model.status();
  const agent::EngineerPolicyOptions engineer =
      agent::EngineerOptions(config.actor().policy().engineer(), absl::GetFlag(FLAGS_kernel_device));
  const std::string ws = std::filesystem::temp_directory_path() / ("op_probe_" + std::to_string(getpid()));
  Json out = Json::object();
  for (absl::string_view path : absl::StrSplit(absl::GetFlag(FLAGS_tasks), ',', absl::SkipEmpty())) {
    auto tasks = learner::rl::LoadTaskSet(std::string(path));
    if (!tasks.ok()) return tasks.status();
    auto corpus = MakeCorpus(*tasks, absl::GetFlag(FLAGS_per_task), config.rollout(), config.skill_text(), engineer,
                             absl::GetFlag(FLAGS_seed), ws);
    if (!corpus.ok()) return corpus.status();
    OpProbeResult result;
    if (auto s = ProbeOpNames(**model, **tokenizer, corpus->records, &result); !s.ok()) return s;
    out[std::string(path)] = OpProbeJson(result);
    std::string line = absl::StrCat("op probe ", path, ":");
    for (const auto& [place, c] : result.by_place) absl::StrAppend(&line, " ", place, " ", c.right, "/", c.total);
    std::fprintf(stderr, "%s\n", line.c_str());
    // Right/total and the mean log-probability of a place's text, by composition.
    for (const auto& [composition, c] : result.by_composition) {
      std::fprintf(stderr, "op probe %s: %s %lld/%lld, mean log-probability %.3f\n", std::string(path).c_str(),
                   composition.c_str(), static_cast<long long>(c.right), static_cast<long long>(c.total),
                   c.total > 0 ? c.logprob / c.total : 0.0);
    }
    // The odds of each design slot's options at the first plan, by task.
    for (const auto& [task, slots] : result.design_odds) {
      std::string odds = absl::StrCat("design odds ", path, ": ", task);
      for (const auto& [slot, d] : slots) {
        absl::StrAppend(&odds, "; ", slot);
        for (const auto& [option, sum] : d.probability) absl::StrAppendFormat(&odds, " %s %.3f", option, sum / d.n);
      }
      std::fprintf(stderr, "%s\n", odds.c_str());
    }
  }
  if (auto probed = ProbeRollouts(**model, **tokenizer); !probed.ok()) {
    return probed.status();
  } else if (!probed->empty()) {
    out["trajectories"] = std::move(*probed);
  }
  std::error_code ec;
  std::filesystem::remove_all(ws, ec);
  std::printf("%s\n", DumpJson(out, 2).c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace kernelrl::codemodel

int main(int argc, char** argv) {
  kernelrl::v1::LearnConfig config;
  if (std::optional<int> exit_code = kernelrl::StartTool(
          argc, argv, "op_probe", "", "--checkpoint --tasks [--per_task --seed --device --kernel_device --threads]",
          &config, [&config] { return kernelrl::TextProto(config); })) {
    return *exit_code;
  }
  if (absl::Status s = kernelrl::codemodel::Run(config); !s.ok()) {
    std::fprintf(stderr, "op_probe: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
