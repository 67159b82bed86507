// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json
// (Qwen2 / Llama-3 style), producing the same ids as HF `tokenizers`.
//
// Encode(text) = split out added tokens (leftmost-longest; lstrip/rstrip
// honoured) -> normalize the rest (none or NFC) -> pre-tokenize with the
// model's split regex -> map each piece's UTF-8 bytes to the byte-level
// alphabet -> apply BPE merges by rank (leftmost first on ties), or take
// the whole piece when `ignore_merges` and it is in the vocabulary.
//
// Contract: FromJson rejects what it cannot reproduce exactly (unknown
// normalizers, pre-tokenizer patterns other than the Qwen2 and Llama-3 ones,
// non-BPE models) with an Unimplemented/InvalidArgument error, instead of
// tokenizing differently from HF. Encode never adds BOS/EOS: the chat
// template says where special tokens go. Thread-safe after construction
// (the piece cache is guarded).
#ifndef KERNELRL_AGENT_TOKENIZER_TOKENIZER_H_
#define KERNELRL_AGENT_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace kernelrl::agent {

class Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& tokenizer_json_path);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(absl::string_view tokenizer_json);

  std::vector<int32_t> Encode(absl::string_view text) const;
  // Concatenated bytes of the tokens (added tokens as their text). Unknown
  // ids are skipped; so are special tokens when skip_special.
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  // Id of a token string (added or vocabulary, byte-level form), or -1.
  int32_t TokenId(absl::string_view token) const;
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }

  // The pre-tokenizer split alone (exposed for tests): pieces of `text`.
  std::vector<std::string> PreTokenize(absl::string_view text) const;

 private:
  struct AddedToken {
    std::string content;
    int32_t id;
    bool special, lstrip, rstrip, normalized;
  };
  Tokenizer() = default;
  absl::Status Parse(absl::string_view json);
  void EncodeSegment(absl::string_view text, std::vector<int32_t>* out) const;
  void EncodeNormalized(absl::string_view text, std::vector<int32_t>* out) const;
  void EncodePiece(absl::string_view piece, std::vector<int32_t>* out) const;
  // Splits on the given added tokens; segments of ordinary text go to fn.
  template <typename Fn>
  void SplitAdded(absl::string_view text, bool normalized_pass, std::vector<int32_t>* out, Fn fn) const;

  bool nfc_ = false;
  int max_digits_ = 1;  // \p{N}{1,max_digits}: 1 for Qwen2, 3 for Llama-3.
  bool ignore_merges_ = false;
  int32_t unk_id_ = -1;
  std::string byte_char_[256];  // Byte -> its byte-level alphabet string.
  absl::flat_hash_map<uint32_t, uint8_t> char_to_byte_;
  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  // (left id, right id) -> (rank, merged id).
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  std::vector<AddedToken> added_;
  absl::flat_hash_map<int32_t, size_t> added_by_id_;

  mutable absl::Mutex cache_mu_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache_ ABSL_GUARDED_BY(cache_mu_);
};

}  // namespace kernelrl::agent

#endif  // KERNELRL_AGENT_TOKENIZER_TOKENIZER_H_
