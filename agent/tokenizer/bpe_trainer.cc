#include "agent/tokenizer/bpe_trainer.h"

#include <cstdint>
#include <queue>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "agent/tokenizer/tokenizer.h"
#include "common/json.h"

namespace kernelrl::agent {
namespace {

constexpr char kQwen2Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// The byte-level alphabet (GPT-2's bytes_to_unicode): printable bytes stand
// for themselves, the others for code points from 256 up, in byte order.
std::vector<std::string> ByteAlphabet() {
  std::vector<std::string> out(256);
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    out[b] = Utf8(printable ? static_cast<uint32_t>(b) : next++);
  }
  return out;
}

Json PreTokenizerJson() {
  return Json::object(
      {{"type", Json("Sequence")},
       {"pretokenizers",
        Json::array({Json::object({{"type", Json("Split")},
                                   {"pattern", Json::object({{"Regex", Json(kQwen2Pattern)}})},
                                   {"behavior", Json("Isolated")},
                                   {"invert", Json(false)}}),
                     Json::object({{"type", Json("ByteLevel")},
                                   {"add_prefix_space", Json(false)},
                                   {"trim_offsets", Json(false)},
                                   {"use_regex", Json(false)}})})}});
}

std::string TokenizerJson(const std::vector<std::string>& tokens, const std::vector<std::pair<int, int>>& merges) {
  // Appended in id order without a lookup per token (the trained tokens are distinct).
  Json::object_t vocab;
  vocab.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) vocab.emplace_back(tokens[i], Json(static_cast<int64_t>(i)));
  Json merge_list = Json::array();
  for (const auto& [a, b] : merges) merge_list.push_back(Json::array({Json(tokens[a]), Json(tokens[b])}));
  Json added = Json::array();
  int64_t id = static_cast<int64_t>(tokens.size());
  for (const std::string& s : ChatSpecialTokens()) {
    added.push_back(Json::object({{"id", Json(id++)},
                             {"content", Json(s)},
                             {"single_word", Json(false)},
                             {"lstrip", Json(false)},
                             {"rstrip", Json(false)},
                             {"normalized", Json(false)},
                             {"special", Json(true)}}));
  }
  Json j = Json::object({{"version", Json("1.0")},
                         {"truncation", Json()},
                         {"padding", Json()},
                         {"added_tokens", std::move(added)},
                         {"normalizer", Json()},
                         {"pre_tokenizer", PreTokenizerJson()},
                         {"post_processor", Json()},
                         {"decoder", Json::object({{"type", Json("ByteLevel")},
                                                   {"add_prefix_space", Json(true)},
                                                   {"trim_offsets", Json(true)},
                                                   {"use_regex", Json(true)}})},
                         {"model", Json::object({{"type", Json("BPE")},
                                                 {"dropout", Json()},
                                                 {"unk_token", Json()},
                                                 {"continuing_subword_prefix", Json()},
                                                 {"end_of_word_suffix", Json()},
                                                 {"fuse_unk", Json(false)},
                                                 {"byte_fallback", Json(false)},
                                                 {"ignore_merges", Json(false)},
                                                 {"vocab", Json(std::move(vocab))},
                                                 {"merges", std::move(merge_list)}})}});
  return DumpJson(j);
}

uint64_t PairKey(int a, int b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

}  // namespace

const std::vector<std::string>& ChatSpecialTokens() {
  static const auto* t = new std::vector<std::string>{"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>",
                                                      "</tool_call>"};
  return *t;
}

absl::StatusOr<std::string> TrainBpe(const std::vector<std::string>& documents, const BpeTrainerOptions& options) {
  if (options.vocab_size < 256) return absl::InvalidArgumentError("vocab_size must be at least 256 (the bytes)");
  std::vector<std::string> tokens = ByteAlphabet();
  // A merge-free tokenizer of the same shape does the pre-tokenizing, so training
  // splits text exactly as encoding will.
  auto splitter = Tokenizer::FromJson(TokenizerJson(tokens, {}));
  if (!splitter.ok()) return splitter.status();

  // 1. Distinct pieces and their counts (special tokens cut out first).
  absl::flat_hash_map<std::string, int64_t> piece_count;
  for (const std::string& doc : documents) {
    absl::string_view rest = doc;
    while (!rest.empty()) {
      size_t cut = rest.size(), len = 0;
      for (const std::string& s : ChatSpecialTokens()) {
        const size_t p = rest.find(s);
        if (p != absl::string_view::npos && p < cut) cut = p, len = s.size();
      }
      for (const std::string& piece : (*splitter)->PreTokenize(rest.substr(0, cut))) ++piece_count[piece];
      rest.remove_prefix(std::min(rest.size(), cut + len));
    }
  }
  std::vector<std::vector<int>> words;
  std::vector<int64_t> freq;
  for (const auto& [piece, n] : piece_count) {
    std::vector<int> w;
    for (unsigned char c : piece) w.push_back(c);
    words.push_back(std::move(w));
    freq.push_back(n);
  }

  // 2. Pair counts and where each pair occurs.
  absl::flat_hash_map<uint64_t, int64_t> count;
  absl::flat_hash_map<uint64_t, absl::flat_hash_set<int>> where;
  auto add_word = [&](int wi, int64_t sign) {
    const std::vector<int>& w = words[wi];
    for (size_t i = 0; i + 1 < w.size(); ++i) {
      const uint64_t k = PairKey(w[i], w[i + 1]);
      count[k] += sign * freq[wi];
      if (sign > 0) where[k].insert(wi);
    }
  };
  for (size_t wi = 0; wi < words.size(); ++wi) add_word(static_cast<int>(wi), +1);

  // Max-heap of (count, merged string, pair) with lazy deletion: an entry is
  // live only while its count is the pair's current count.
  using Entry = std::tuple<int64_t, std::string, uint64_t>;
  auto worse = [](const Entry& x, const Entry& y) {
    if (std::get<0>(x) != std::get<0>(y)) return std::get<0>(x) < std::get<0>(y);
    return std::get<1>(x) > std::get<1>(y);  // Smaller merged string wins a tie.
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(worse)> heap(worse);
  auto push = [&](uint64_t k) {
    const int64_t n = count[k];
    if (n > 0) heap.emplace(n, tokens[k >> 32] + tokens[k & 0xffffffffu], k);
  };
  for (const auto& [k, n] : count) push(k);

  // 3. Merge until the vocabulary is full.
  std::vector<std::pair<int, int>> merges;
  while (static_cast<int>(tokens.size()) < options.vocab_size && !heap.empty()) {
    auto [n, merged, k] = heap.top();
    heap.pop();
    auto it = count.find(k);
    if (it == count.end() || it->second != n) continue;  // Stale entry.
    if (n < options.min_frequency) break;
    const int a = static_cast<int>(k >> 32), b = static_cast<int>(k & 0xffffffffu);
    const int c = static_cast<int>(tokens.size());
    tokens.push_back(merged);
    merges.emplace_back(a, b);
    const absl::flat_hash_set<int> affected = std::move(where[k]);
    where.erase(k);
    absl::flat_hash_set<uint64_t> touched;
    for (int wi : affected) {
      std::vector<int>& w = words[wi];
      for (size_t i = 0; i + 1 < w.size(); ++i) touched.insert(PairKey(w[i], w[i + 1]));
      add_word(wi, -1);
      std::vector<int> out;
      for (size_t i = 0; i < w.size(); ++i) {
        if (i + 1 < w.size() && w[i] == a && w[i + 1] == b) {
          out.push_back(c);
          ++i;
        } else {
          out.push_back(w[i]);
        }
      }
      w = std::move(out);
      add_word(wi, +1);
      for (size_t i = 0; i + 1 < w.size(); ++i) touched.insert(PairKey(w[i], w[i + 1]));
    }
    count.erase(k);
    for (uint64_t t : touched) {
      if (t != k) push(t);
    }
  }
  return TokenizerJson(tokens, merges);
}

}  // namespace kernelrl::agent
