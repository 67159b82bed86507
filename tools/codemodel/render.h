// A corpus record (tools/codemodel/corpus.h CorpusRecord) as the chat the
// actor would render: the same ChatFormat, so SFT trains on exactly the token
// layout the policy sees in a rollout, with the loss on assistant tokens only.
#ifndef KERNELRL_TOOLS_CODEMODEL_RENDER_H_
#define KERNELRL_TOOLS_CODEMODEL_RENDER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/chat/chat_format.h"
#include "agent/tokenizer/tokenizer.h"
#include "common/json.h"

namespace kernelrl::codemodel {

// The formats a record renders with, for one tokenizer: `with_tools` (the
// actor's tool schemas announced in the system turn) when the record says the
// tools were announced (absent: true), else `plain`.
struct RecordFormats {
  static absl::StatusOr<RecordFormats> Create(const agent::Tokenizer* tokenizer);
  agent::ChatFormat with_tools;
  agent::ChatFormat plain;
};

absl::StatusOr<std::vector<agent::ChatTurn>> RecordTurns(const Json& record);
// train_rejected false: a message marked "rejected" (CorpusRecord) renders with no loss on its
// tokens: the model reads it as context and is not taught to write it.
absl::StatusOr<agent::RenderedChat> RenderRecord(const Json& record, const RecordFormats& formats,
                                                 bool train_rejected = true);
absl::StatusOr<std::string> RenderedText(const Json& record, const RecordFormats& formats);

// The code model's tokenizer (an HF tokenizer.json): byte-level BPE of `vocab_size` (bytes +
// merges, then the ChatML specials) trained on `records` rendered whole (headers, tool schemas
// where announced): what the model reads.
absl::StatusOr<std::string> TrainRecordTokenizer(const std::vector<Json>& records, int vocab_size);

// How rendered records fit a rollout's caps (RolloutConfig: the policy's
// replies stop at max_new_tokens_per_turn, a rollout at context_tokens; 0 = no
// cap): a corpus beyond them would teach replies the policy cannot finish.
struct LengthAudit {
  int64_t max_turn_tokens = 0, context_tokens = 0;  // The caps.
  int64_t longest_turn = 0, longest = 0, turns_over = 0, records_over = 0;
  // An assistant turn is a run of loss-mask tokens.
  void Add(const agent::RenderedChat& rendered);
  // InvalidArgument naming the cap when a record exceeds one.
  absl::Status Check() const;
};

}  // namespace kernelrl::codemodel

#endif  // KERNELRL_TOOLS_CODEMODEL_RENDER_H_
