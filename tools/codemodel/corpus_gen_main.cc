// corpus_gen: the code model's corpus and tokenizer (tools/codemodel/corpus.h).
//
//   corpus_gen --config=configs/learn/codemodel.textproto --tasks=FAMILY/train.jsonl --out=DIR
//              [--per_task=8] [--seed=1] [--device=cuda|cpu] [--vocab_size=4096]
//
// The config is the run's kernelrl.v1.LearnConfig preset: its `rollout` (system
// prompt, SKILL.md and the tool schemas in the prompt or not) and `skill_text`
// are the ones the actors will use, so the corpus's prompts are the run's, and
// the engineer plays as its `actor.policy.engineer` says (planted faults, fp16
// first designs, revisions), as the warm-up's engineer actors do. Only tasks whose
// metadata says split "train" or "reading" (family_gen's compositions for the corpus
// alone) are used: held-out tasks never enter the corpus.
//
//   DIR/corpus.jsonl   one trajectory a line (CorpusRecord)
//   DIR/tokenizer.json byte-level BPE trained on the rendered corpus (vocab_size
//                      byte symbols + merges, then the ChatML specials)
//   DIR/stats.json     counts: trajectories, turns, tool calls by name, fixes, tokens
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/chat/chat_format.h"
#include "agent/policy/policy_factory.h"
#include "common/config.h"
#include "common/file.h"
#include "common/log.h"
#include "google/protobuf/util/json_util.h"
#include "proto/cli_config.pb.h"
#include "tools/codemodel/corpus.h"
#include "tools/codemodel/render.h"
#include "tools/codemodel/tool_lines.h"

ABSL_FLAG(std::string, tasks, "", "family_gen's train.jsonl (and reading.jsonl, appended)");
ABSL_FLAG(std::string, out, "", "output directory");
ABSL_FLAG(int, per_task, 8, "trajectories per training task");
ABSL_FLAG(uint64_t, seed, 1, "seed of the designs, faults and phrasings");
ABSL_FLAG(std::string, device, "cuda", "kernels for cuda (.cu) or cpu (.cc)");
ABSL_FLAG(int, vocab_size, 4096, "BPE vocabulary (bytes + merges; 0 = no tokenizer)");

namespace kernelrl::codemodel {
namespace {

absl::StatusOr<std::vector<v1::Task>> TrainTasks(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  std::vector<v1::Task> out;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    v1::Task t;
    if (auto s = google::protobuf::util::JsonStringToMessage(std::string(line), &t); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.ToString()));
    }
    auto split = t.metadata().find("split");
    if (split != t.metadata().end() && (split->second == "train" || split->second == "reading")) {
      out.push_back(std::move(t));
    }
  }
  if (out.empty()) return absl::NotFoundError(path + ": no task with metadata split \"train\" or \"reading\"");
  return out;
}

absl::Status Run(const v1::LearnConfig& config) {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return absl::InvalidArgumentError("--out is required");
  auto tasks = TrainTasks(absl::GetFlag(FLAGS_tasks));
  if (!tasks.ok()) return tasks.status();
  std::filesystem::create_directories(out + "/ws");

  // The engineer plays as the warm-up's engineer actors will (the preset's actor.policy.engineer).
  const agent::EngineerPolicyOptions o = agent::EngineerOptions(config.actor().policy().engineer(), absl::GetFlag(FLAGS_device));
  auto corpus = MakeCorpus(*tasks, absl::GetFlag(FLAGS_per_task), config.rollout(), config.skill_text(), o,
                           absl::GetFlag(FLAGS_seed), out + "/ws");
  if (!corpus.ok()) return corpus.status();
  const int64_t n = static_cast<int64_t>(corpus->records.size());
  std::string lines;
  for (const Json& r : corpus->records) absl::StrAppend(&lines, DumpJson(r), "\n");
  if (auto s = WriteFileAtomically(out + "/corpus.jsonl", lines); !s.ok()) return s;
  // The tools' lines as the base will have read them (pretrain copies the file into the base).
  if (auto s = WriteToolLineShapes(CorpusToolLineShapes(corpus->records), out + "/" + kToolLineShapesFile); !s.ok()) {
    return s;
  }
  int64_t rejected = 0;  // Replies whose code the next verdict rejected (CorpusRecord).
  for (const Json& r : corpus->records) {
    for (const Json& m : *FindJson(r, "messages")) rejected += FindJson(m, "rejected") != nullptr;
  }
  Json stats = Json::object({{"trajectories", Json(n)},
                             {"tasks", Json(static_cast<int64_t>(tasks->size()))},
                             {"mean_assistant_turns", Json(static_cast<double>(corpus->assistant_turns) / n)},
                             {"failed_evaluations_fixed", Json(corpus->failed_evaluations)},
                             {"final_ok", Json(corpus->final_ok)},
                             {"replies_rejected", Json(rejected)}});
  Json by_tool = Json::object();
  for (const auto& [name, c] : corpus->tool_calls) by_tool[name] = Json(c);
  stats["tool_calls"] = std::move(by_tool);
  if (const int vocab = absl::GetFlag(FLAGS_vocab_size); vocab > 0) {
    auto json = TrainRecordTokenizer(corpus->records, vocab);
    if (!json.ok()) return json.status();
    if (auto s = WriteFileAtomically(out + "/tokenizer.json", *json); !s.ok()) return s;
    auto trained = agent::Tokenizer::FromJson(*json);
    if (!trained.ok()) return trained.status();
    auto fmt = RecordFormats::Create(trained->get());
    if (!fmt.ok()) return fmt.status();
    int64_t model_tokens = 0, tokens = 0;
    LengthAudit lengths;
    lengths.max_turn_tokens = config.rollout().max_new_tokens_per_turn();
    lengths.context_tokens = config.rollout().context_tokens();
    for (const Json& rec : corpus->records) {
      auto rendered = RenderRecord(rec, *fmt);
      if (!rendered.ok()) return rendered.status();
      tokens += static_cast<int64_t>(rendered->ids.size());
      for (int32_t m : rendered->loss_mask) model_tokens += m;
      lengths.Add(*rendered);
    }
    stats["vocab_size"] = Json((*trained)->vocab_size());
    stats["mean_tokens"] = Json(static_cast<double>(tokens) / n);
    stats["mean_model_tokens"] = Json(static_cast<double>(model_tokens) / n);
    stats["longest_turn_model_tokens"] = Json(lengths.longest_turn);
    stats["longest_tokens"] = Json(lengths.longest);
    if (auto s = lengths.Check(); !s.ok()) return absl::InvalidArgumentError(absl::StrCat("the corpus: ", s.message()));
  }
  std::error_code ec;
  std::filesystem::remove_all(out + "/ws", ec);
  if (auto s = WriteFileAtomically(out + "/stats.json", DumpJson(stats, 2) + "\n"); !s.ok()) return s;
  std::printf("%s\n", DumpJson(stats, 2).c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace kernelrl::codemodel

int main(int argc, char** argv) {
  kernelrl::v1::LearnConfig config;
  if (std::optional<int> exit_code =
          kernelrl::StartTool(argc, argv, "corpus_gen", "", "--tasks --out [--per_task --seed --device --vocab_size]",
                              &config, [&config] { return kernelrl::TextProto(config); })) {
    return *exit_code;
  }
  if (absl::Status s = kernelrl::codemodel::Run(config); !s.ok()) {
    std::fprintf(stderr, "corpus_gen: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
