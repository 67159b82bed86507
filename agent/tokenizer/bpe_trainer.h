// Trains a byte-level BPE tokenizer on a corpus and writes it as a Hugging
// Face tokenizer.json that Tokenizer::Load (and HF `tokenizers`) read: the
// Qwen2 split regex, ByteLevel(use_regex=false, add_prefix_space=false), no
// normalizer, and the ChatML and tool-call markers as special added tokens.
//
// Algorithm (the usual one): split out the special tokens, pre-tokenize each
// remaining segment with the Qwen2 regex, count the distinct pieces, start
// every piece as its bytes (the 256 byte-level symbols), then repeatedly
// merge the most frequent adjacent pair (ties: the pair of smallest merged
// string, so a corpus always gives the same tokenizer) until the vocabulary
// reaches vocab_size or no pair occurs min_frequency times. Pair counts are
// kept incrementally (only the pieces holding the merged pair are recounted),
// so a corpus of a few MB trains in seconds.
//
// Contract: the merges are written in the order learned, which is the rank
// order the encoder applies, so Encode() re-segments every training piece
// exactly as training ended. Ids: 256 byte symbols, then merges, then the
// special tokens.
#ifndef KERNELRL_AGENT_TOKENIZER_BPE_TRAINER_H_
#define KERNELRL_AGENT_TOKENIZER_BPE_TRAINER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kernelrl::agent {

struct BpeTrainerOptions {
  int vocab_size = 4096;  // Byte symbols + merges (the special tokens come on top).
  int min_frequency = 2;  // A pair occurring fewer times is not merged.
};

// The special tokens every trained tokenizer carries (ChatML and tool calls).
const std::vector<std::string>& ChatSpecialTokens();

// Trains on `documents` and returns the tokenizer.json text.
absl::StatusOr<std::string> TrainBpe(const std::vector<std::string>& documents, const BpeTrainerOptions& options);

}  // namespace kernelrl::agent

#endif  // KERNELRL_AGENT_TOKENIZER_BPE_TRAINER_H_
