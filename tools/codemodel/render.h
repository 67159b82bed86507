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
absl::StatusOr<agent::RenderedChat> RenderRecord(const Json& record, const RecordFormats& formats);
absl::StatusOr<std::string> RenderedText(const Json& record, const RecordFormats& formats);

}  // namespace kernelrl::codemodel

#endif  // KERNELRL_TOOLS_CODEMODEL_RENDER_H_
