// How well a code model reads its task: teacher-forced on engineer
// trajectories (the corpus's own, for any task set, held-out included, kept
// in memory), whether the model's most likely next token is the right one
// at each place where the reply names one of the task's ops. The places:
//   summary  "The task is F: a -> b." (the first reply's plan)
//   header   "// kernelrl family template: F: a -> b; ..." (the kernel's first line)
//   comment  "// a" (the line before the op's expression in the kernel)
//   expression  the line after it ("v = fmaxf(v, 0.f);"), right when the model's
//            most likely next token is the text's at every token of the line:
//            whether the model writes the op it named, not only names it
//   verdict_reward / verdict_figures / verdict_decision  the reply after a Profile with
//            stop_at_reward ("Reward 2: 1.31x eager, 0.87x compile. Trying ..."): the reward's
//            digit, the reward and both speed-ups as the verdict gave them, and "Done" or
//            "Trying": whether the model reads the verdict it answers
// The first op of a summary or header and the later ones are counted apart
// (`summary_first`, `summary_later`, ...). Summaries and headers written as
// templates wrote them before, "F (a -> b)", are read too: there the first
// op followed "(" and was a token of its own ("relu", not model.py's " relu").
#ifndef KERNELRL_TOOLS_CODEMODEL_OP_PROBE_H_
#define KERNELRL_TOOLS_CODEMODEL_OP_PROBE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/tokenizer/tokenizer.h"
#include "common/json.h"
#include "learner/model.h"
#include "proto/trajectory.pb.h"
#include "tools/codemodel/render.h"

namespace kernelrl::codemodel {

struct OpProbeCount {
  int64_t right = 0, total = 0;
  // The log-probability the model gives the places' text, teacher-forced, summed over them: how
  // far a model is from writing the right op, where `right` only says whether it would.
  double logprob = 0;
};

struct DesignOdds {
  std::map<std::string, double> probability;  // Option -> summed probability, over `n` texts.
  int64_t n = 0;
};

struct OpProbeResult {
  int64_t records = 0;
  std::map<std::string, OpProbeCount> by_place;   // summary_first, summary_later, header_first, ...
  std::map<std::string, OpProbeCount> by_family;  // Every place together.
  // By the task's op chain, "elementwise: scale -> tanh -> abs", the places that name an op
  // together (not the verdict's): which compositions a policy misreads (held-out tasks split by
  // composition).
  std::map<std::string, OpProbeCount> by_composition;
  // The expression lines by op ("tanh"): which ops a model names but does not write.
  std::map<std::string, OpProbeCount> expression_by_op;
  // By task id, then design slot ("strategy"): the model's odds for the slot's options where the
  // first text it wrote names that slot ("strategy=block", the first plan), each option's text
  // scored from the same prefix and the scores normalised over the options. A smooth measure of
  // the design a policy would choose, where a greedy rollout shows only the winner. Later slots
  // read after the earlier ones as the text wrote them.
  std::map<std::string, std::map<std::string, DesignOdds>> design_odds;
};

// Where `record`'s assistant text names its task's ops: {place, character offset of the
// op's name in `text`} for `text` = the record rendered (RenderedChat::text).
struct OpMention {
  std::string place;
  size_t offset = 0;
  size_t end = 0;  // 0: the op's name, one token; else the place is the text [offset, end).
  std::string op;  // The op an expression line computes ("" elsewhere).
};
absl::StatusOr<std::vector<OpMention>> OpMentions(const std::string& text);

// Probes `records` (CorpusRecord lines, by their task_id) with `model` (a language-model head)
// through `tokenizer`, adding to `result`.
absl::Status ProbeOpNames(const learner::Transformer& model, const agent::Tokenizer& tokenizer,
                          const std::vector<Json>& records, OpProbeResult* result);

Json OpProbeJson(const OpProbeResult& result);

// Where a model's most likely next token first differs from a sequence's own, among the model's
// tokens: for a greedy rollout of another policy, where the two policies' greedy texts part, and
// by how much the model prefers its own token there.
struct Divergence {
  int64_t model_tokens = 0;  // The sequence's model tokens.
  int64_t token = -1;        // Its index in the sequence; -1: the model predicts every one.
  int64_t model_token = -1;  // Its index among the model tokens.
  std::string written, predicted;  // The sequence's token and the model's, decoded.
  double margin = 0;               // log p(predicted) - log p(written) >= 0, nats.
  std::string before;              // Up to 120 characters of text before it.
};

// A rollout probed: its op places (the policy's own text, so "right" is whether the model would
// write what the rollout wrote) and the first divergence.
struct TrajectoryProbe {
  OpProbeResult places;
  Divergence divergence;
};
absl::StatusOr<TrajectoryProbe> ProbeTrajectory(const learner::Transformer& model, const agent::Tokenizer& tokenizer,
                                                const v1::Trajectory& trajectory);

}  // namespace kernelrl::codemodel

#endif  // KERNELRL_TOOLS_CODEMODEL_OP_PROBE_H_
