// UTF-8 and the few Unicode facts byte-level BPE tokenizers depend on:
// the \p{L} / \p{N} / \s classes of their pre-tokenizer regexes, and NFC
// normalization (Qwen2's tokenizer.json normalizes to NFC).
//
// Contract: DecodeUtf8 never fails: invalid bytes decode to U+FFFD one byte
// at a time (the bytes themselves still reach the byte-level BPE, which
// works on the original UTF-8). Tables are generated from Python's
// unicodedata by gen_unicode_tables.py.
#ifndef KERNELRL_AGENT_TOKENIZER_UNICODE_H_
#define KERNELRL_AGENT_TOKENIZER_UNICODE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/text.h"
#include <vector>

#include "absl/strings/string_view.h"

namespace kernelrl::agent {

struct CodepointRange { uint32_t first, last; };
struct CombiningClass { uint32_t cp; uint8_t ccc; };
struct Decomposition { uint32_t cp; uint8_t n; uint32_t to[4]; };
struct Composition { uint32_t a, b, composite; };

// One code point and where it sits in the UTF-8 string.
struct Codepoint {
  uint32_t cp;
  uint32_t offset;  // Byte offset of the first byte.
  uint32_t length;  // Bytes (1..4).
};

std::vector<Codepoint> DecodeUtf8(absl::string_view s);
using ::kernelrl::AppendUtf8;  // common/text.h

bool IsLetter(uint32_t cp);
bool IsNumber(uint32_t cp);
bool IsWhiteSpace(uint32_t cp);

// Unicode Normalization Form C.
std::string NormalizeNfc(absl::string_view s);

namespace unicode_tables {
extern const CodepointRange kLetters[];
extern const size_t kLettersSize;
extern const CodepointRange kNumbers[];
extern const size_t kNumbersSize;
extern const CodepointRange kWhiteSpace[];
extern const size_t kWhiteSpaceSize;
extern const CombiningClass kCombiningClasses[];
extern const size_t kCombiningClassesSize;
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionsSize;
extern const Composition kCompositions[];
extern const size_t kCompositionsSize;
}  // namespace unicode_tables

}  // namespace kernelrl::agent

#endif  // KERNELRL_AGENT_TOKENIZER_UNICODE_H_
