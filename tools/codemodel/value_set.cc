#include "tools/codemodel/value_set.h"

#include <filesystem>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "agent/tokenizer/tokenizer.h"
#include "common/file.h"
#include "google/protobuf/text_format.h"
#include "learner/rl/ingest.h"
#include "learner/rl/ledger.h"
#include "proto/learner.pb.h"

namespace kernelrl::codemodel {

absl::StatusOr<double> StatedProfileReward(const std::string& tool_content) {
  for (absl::string_view line : absl::StrSplit(tool_content, '\n')) {
    if (!absl::ConsumePrefix(&line, "reward ")) continue;
    double r = 0;
    if (absl::SimpleAtod(line, &r)) return r;
  }
  return absl::NotFoundError("the Profile result states no reward");
}

namespace {

v1::Trajectory Cut(const agent::RenderedChat& rendered, int32_t end, double reward, const std::string& task_id,
                   std::string id) {
  v1::Trajectory t;
  t.set_id(std::move(id));
  t.set_task_id(task_id);
  t.mutable_token_ids()->Add(rendered.ids.begin(), rendered.ids.begin() + end);
  t.mutable_loss_mask()->Add(rendered.loss_mask.begin(), rendered.loss_mask.begin() + end);
  t.mutable_logprobs()->Resize(end, 0.f);
  t.set_reward(reward);
  t.mutable_sampling()->set_policy("engineer");
  return t;
}

}  // namespace

absl::StatusOr<std::vector<v1::Trajectory>> ValueTrajectories(const Json& record, const RecordFormats& formats,
                                                              bool profile_prefixes, const std::string& id_prefix) {
  // Every assistant token is a critic position, the rejected replies' too: the policy writes such replies.
  auto rendered = RenderRecord(record, formats, /*train_rejected=*/true);
  if (!rendered.ok()) return rendered.status();
  const Json* task = FindJson(record, "task_id");
  const Json* reward = FindJson(record, "reward");
  if (task == nullptr || !task->is_string() || reward == nullptr || !reward->is_number()) {
    return absl::InvalidArgumentError("corpus record without task_id or reward");
  }
  const std::string task_id = task->get<std::string>();
  std::vector<v1::Trajectory> out;
  out.push_back(Cut(*rendered, static_cast<int32_t>(rendered->ids.size()), reward->get<double>(), task_id, id_prefix));
  if (!profile_prefixes) return out;
  // A reply may call several tools (a sed, then Profile): the Profile's prefix ends with the last
  // assistant turn before its result; a reply followed by two Profiles is valued by the later.
  const Json& messages = *FindJson(record, "messages");
  std::map<size_t, double> paid_by_reply;
  size_t reply = messages.size();
  for (size_t i = 0; i < messages.size() && i < rendered->turns.size(); ++i) {
    const std::string role = FindJson(messages[i], "role")->get<std::string>();
    if (role == "assistant") reply = i;
    if (role != "tool" || reply == messages.size()) continue;
    const std::string content = FindJson(messages[i], "content")->get<std::string>();
    if (!absl::StartsWith(content, "Profile:")) continue;
    if (auto paid = StatedProfileReward(content); paid.ok()) paid_by_reply[reply] = *paid;
  }
  for (const auto& [i, paid] : paid_by_reply) {
    out.push_back(Cut(*rendered, rendered->turns[i].token_end, paid, task_id, absl::StrCat(id_prefix, "-p", out.size())));
  }
  return out;
}

absl::StatusOr<ValueSetSummary> WriteValueSet(const std::string& corpus_jsonl, const std::string& tokenizer_json,
                                              bool profile_prefixes, const std::string& out_dir) {
  if (std::filesystem::exists(out_dir + "/ledger.jsonl")) {
    return absl::FailedPreconditionError(out_dir + " already holds a ledger");
  }
  auto tokenizer = agent::Tokenizer::Load(tokenizer_json);
  if (!tokenizer.ok()) return tokenizer.status();
  auto formats = RecordFormats::Create(tokenizer->get());
  if (!formats.ok()) return formats.status();
  auto text = ReadFileToString(corpus_jsonl);
  if (!text.ok()) return text.status();
  std::error_code ec;
  std::filesystem::create_directories(out_dir + "/trajectories", ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", out_dir, ": ", ec.message()));
  // The tokenizer travels with the set: the directory is its own base checkpoint, which the importer's
  // tokenizer check reads.
  auto tok_bytes = ReadFileToString(tokenizer_json);
  if (!tok_bytes.ok()) return tok_bytes.status();
  if (auto s = WriteFileAtomically(out_dir + "/tokenizer.json", *tok_bytes); !s.ok()) return s;
  v1::Job job;
  job.set_id("corpus-value-set");
  job.mutable_spec()->set_base_checkpoint(std::filesystem::absolute(out_dir).string());
  std::string job_text;
  google::protobuf::TextFormat::PrintToString(job, &job_text);
  if (auto s = WriteFileAtomically(out_dir + "/job.textproto", job_text); !s.ok()) return s;

  auto ledger = learner::rl::Ledger::Open(out_dir + "/ledger.jsonl", nullptr);
  if (!ledger.ok()) return ledger.status();
  ValueSetSummary summary;
  std::vector<v1::LedgerRecord> accepted;
  int64_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    ++line_no;
    auto record = ParseJson(line);
    if (!record.ok()) return absl::InvalidArgumentError(absl::StrCat(corpus_jsonl, ":", line_no, ": ", record.status().message()));
    auto trajectories = ValueTrajectories(*record, *formats, profile_prefixes, absl::StrCat("corpus-", line_no));
    if (!trajectories.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(corpus_jsonl, ":", line_no, ": ", trajectories.status().message()));
    }
    for (const v1::Trajectory& t : *trajectories) {
      std::string bytes;
      t.SerializeToString(&bytes);
      if (auto s = WriteFileAtomically(learner::rl::Ingest::TrajectoryFile(out_dir, t.id()), bytes); !s.ok()) return s;
      v1::LedgerRecord r;
      r.set_kind(v1::LedgerRecord::ACCEPTED);
      r.set_trajectory_id(t.id());
      r.set_task_id(t.task_id());
      r.set_reward(t.reward());
      r.set_stage(kCorpusValueStage);
      accepted.push_back(std::move(r));
      summary.rewards.push_back(t.reward());
    }
    summary.episodes += 1;
    summary.prefixes += static_cast<int64_t>(trajectories->size()) - 1;
  }
  if (summary.episodes == 0) return absl::InvalidArgumentError(corpus_jsonl + " holds no record");
  if (auto s = (*ledger)->Append(std::move(accepted)); !s.ok()) return s;
  return summary;
}

}  // namespace kernelrl::codemodel
