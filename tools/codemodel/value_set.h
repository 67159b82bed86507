// The engineer's corpus as value-pretraining data for the critic: each episode
// rendered as the policy reads it, valued by the reward its final evaluation
// paid, and (profile_prefixes) each episode cut after every assistant turn
// that called Profile, valued by what that Profile paid. A policy that stops at
// a Profile is paid what its final evaluation finds in the same files, so a
// prefix's return is the one a rollout ending there would have had; and the
// corpus spans every training task with many designs each, which the few
// trajectories per (task, design) a learning run collects do not
// (docs/CODEMODEL.md, twenty-first sitting: value_ceiling).
//
// Written as a job directory (job.textproto, ledger.jsonl, trajectories/) of
// accepted trajectories of the stage "corpus", sampled by "engineer" (never
// weighted by an importance ratio), with the tokenizer beside them as the
// job's base checkpoint: what recipe.value_pretrain.import_job_dirs and
// critic_replay_bench --job_dir read.
#ifndef KERNELRL_TOOLS_CODEMODEL_VALUE_SET_H_
#define KERNELRL_TOOLS_CODEMODEL_VALUE_SET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/json.h"
#include "proto/trajectory.pb.h"
#include "tools/codemodel/render.h"

namespace kernelrl::codemodel {

inline constexpr char kCorpusValueStage[] = "corpus";

// The reward a Profile tool result's text states (its "reward N" line);
// NotFound when it states none.
absl::StatusOr<double> StatedProfileReward(const std::string& tool_content);

// `record` (CorpusRecord) as value samples: the whole episode with the
// record's reward, and with profile_prefixes one more per Profile whose
// result states a reward, cut after the assistant turn that called it. Token
// ids, the assistant tokens as the loss mask, log-probs 0.
absl::StatusOr<std::vector<v1::Trajectory>> ValueTrajectories(const Json& record, const RecordFormats& formats,
                                                              bool profile_prefixes, const std::string& id_prefix);

struct ValueSetSummary {
  int64_t episodes = 0, prefixes = 0;
  std::vector<double> rewards;  // Of every trajectory written, in order.
};
// Writes the value set of `corpus_jsonl` (a corpus_gen corpus.jsonl) tokenized by `tokenizer_json` into
// `out_dir` (created; FailedPrecondition when it already holds a ledger).
absl::StatusOr<ValueSetSummary> WriteValueSet(const std::string& corpus_jsonl, const std::string& tokenizer_json,
                                              bool profile_prefixes, const std::string& out_dir);

}  // namespace kernelrl::codemodel

#endif  // KERNELRL_TOOLS_CODEMODEL_VALUE_SET_H_
