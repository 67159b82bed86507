#include "agent/tokenizer/tokenizer.h"

#include <algorithm>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "common/file.h"
#include "agent/tokenizer/unicode.h"

namespace kernelrl::agent {
namespace {

// A component's "type" member, or "" when absent or not a string.
std::string TypeOf(const Json& component) { return GetJsonString(component, "type", "").value_or(""); }

// The split patterns we reproduce exactly (as written in tokenizer.json).
constexpr absl::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr absl::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

uint64_t PairKey(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

bool IsNewline(uint32_t cp) { return cp == '\r' || cp == '\n'; }
uint32_t Lower(uint32_t cp) { return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp; }

// Byte ranges [begin, end) of the pieces of the Qwen2 / Llama-3 split
// regex, by hand: at each position the first alternative that matches wins,
// each with the extent its greedy quantifiers and backtracking give.
std::vector<std::pair<size_t, size_t>> SplitPieces(const std::vector<Codepoint>& cps, size_t total_bytes,
                                                   int max_digits) {
  std::vector<std::pair<size_t, size_t>> pieces;
  const size_t n = cps.size();
  auto byte_at = [&](size_t i) { return i < n ? static_cast<size_t>(cps[i].offset) : total_bytes; };
  auto is_other = [&](size_t i) { return !IsWhiteSpace(cps[i].cp) && !IsLetter(cps[i].cp) && !IsNumber(cps[i].cp); };
  size_t i = 0;
  while (i < n) {
    const uint32_t c = cps[i].cp;
    size_t end = 0;
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (c == '\'' && i + 1 < n) {
      const uint32_t a = Lower(cps[i + 1].cp);
      const uint32_t b = i + 2 < n ? Lower(cps[i + 2].cp) : 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd') end = i + 2;
      else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) end = i + 3;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (end == 0) {
      size_t j = i;
      if (!IsLetter(c) && !IsNewline(c) && !IsNumber(c) && i + 1 < n && IsLetter(cps[i + 1].cp)) j = i + 1;
      if (IsLetter(cps[j].cp)) {
        while (j < n && IsLetter(cps[j].cp)) ++j;
        end = j;
      }
    }
    // \p{N}{1,max_digits}
    if (end == 0 && IsNumber(c)) {
      size_t j = i;
      while (j < n && j - i < static_cast<size_t>(max_digits) && IsNumber(cps[j].cp)) ++j;
      end = j;
    }
    // ' '?[^\s\p{L}\p{N}]+[\r\n]*
    if (end == 0) {
      size_t j = i;
      if (c == ' ' && i + 1 < n && is_other(i + 1)) j = i + 1;
      if (is_other(j)) {
        while (j < n && is_other(j)) ++j;
        while (j < n && IsNewline(cps[j].cp)) ++j;
        end = j;
      }
    }
    if (end == 0 && IsWhiteSpace(c)) {
      size_t e = i;
      while (e < n && IsWhiteSpace(cps[e].cp)) ++e;
      // \s*[\r\n]+ : up to and including the last newline of the run.
      size_t last_nl = n;
      for (size_t k = e; k > i; --k) {
        if (IsNewline(cps[k - 1].cp)) {
          last_nl = k - 1;
          break;
        }
      }
      if (last_nl != n) {
        end = last_nl + 1;
      } else if (e == n) {
        end = e;  // \s+(?!\S) at the end of the text.
      } else if (e - i >= 2) {
        end = e - 1;  // \s+(?!\S): leave the last space to the next piece.
      } else {
        end = e;  // \s+
      }
    }
    if (end == 0) end = i + 1;  // Unreachable: every code point is L, N, \s or other.
    pieces.emplace_back(byte_at(i), byte_at(end));
    i = end;
  }
  return pieces;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  auto t = FromJson(*text);
  if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat(path, ": ", t.status().message()));
  return t;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(absl::string_view json) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  if (auto s = t->Parse(json); !s.ok()) return s;
  return t;
}

absl::Status Tokenizer::Parse(absl::string_view text) {
  auto parsed = ParseJson(text);
  if (!parsed.ok()) return parsed.status();
  const Json& j = *parsed;

  // Normalizer: none, NFC, or a sequence of NFC.
  if (const Json* norm = FindJson(j, "normalizer"); norm != nullptr && !norm->is_null()) {
    std::vector<const Json*> list = {norm};
    if (TypeOf(*norm) == "Sequence") {
      list.clear();
      for (const Json& n : *FindJson(*norm, "normalizers")) list.push_back(&n);
    }
    for (const Json* n : list) {
      if (TypeOf(*n) != "NFC") {
        return absl::UnimplementedError(absl::StrCat("normalizer ", DumpJson(*n), " is not supported (NFC is)"));
      }
      nfc_ = true;
    }
  }

  // Pre-tokenizer: Sequence[Split(Qwen2 or Llama-3 regex, Isolated), ByteLevel(use_regex=false)].
  const Json* pre = FindJson(j, "pre_tokenizer");
  bool split_ok = false, byte_level_ok = false;
  if (pre != nullptr && TypeOf(*pre) == "Sequence") {
    for (const Json& p : *FindJson(*pre, "pretokenizers")) {
      const std::string type = TypeOf(p);
      if (type == "Split") {
        const Json* pat = FindJson(p, "pattern");
        const Json* re = pat ? FindJson(*pat, "Regex") : nullptr;
        auto behavior = GetJsonString(p, "behavior", "");
        auto invert = GetJsonBool(p, "invert", false);
        if (re == nullptr || !re->is_string() || !behavior.ok() || *behavior != "Isolated" || !invert.ok() || *invert) break;
        if (re->get<std::string>() == kQwen2Pattern) {
          max_digits_ = 1;
        } else if (re->get<std::string>() == kLlama3Pattern) {
          max_digits_ = 3;
        } else {
          return absl::UnimplementedError(absl::StrCat("pre-tokenizer split pattern not supported: ", re->get<std::string>()));
        }
        split_ok = true;
      } else if (type == "ByteLevel") {
        auto use_regex = GetJsonBool(p, "use_regex", true);
        auto prefix = GetJsonBool(p, "add_prefix_space", false);
        if (!use_regex.ok() || *use_regex || !prefix.ok() || *prefix) break;
        byte_level_ok = true;
      } else {
        break;
      }
    }
  }
  if (!split_ok || !byte_level_ok) {
    return absl::UnimplementedError(
        "pre_tokenizer must be Sequence[Split(Qwen2 or Llama-3 regex, Isolated), ByteLevel(use_regex=false, "
        "add_prefix_space=false)]");
  }

  // Byte-level alphabet (GPT-2): printable bytes map to themselves, the rest to U+0100 onwards.
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
    AppendUtf8(cp, &byte_char_[b]);
    char_to_byte_[cp] = static_cast<uint8_t>(b);
  }

  const Json* model = FindJson(j, "model");
  if (model == nullptr || TypeOf(*model) != "BPE") {
    return absl::UnimplementedError("model.type must be BPE");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json* v = FindJson(*model, key);
    if (v != nullptr && !v->is_null() && !(v->is_string() && v->get<std::string>().empty())) {
      return absl::UnimplementedError(absl::StrCat("BPE ", key, " is not supported"));
    }
  }
  if (auto bf = GetJsonBool(*model, "byte_fallback", false); !bf.ok() || *bf) {
    return absl::UnimplementedError("BPE byte_fallback is not supported (byte-level BPE needs none)");
  }
  auto ignore = GetJsonBool(*model, "ignore_merges", false);
  if (!ignore.ok()) return ignore.status();
  ignore_merges_ = *ignore;
  const Json* vocab = FindJson(*model, "vocab");
  if (vocab == nullptr || !vocab->is_object()) return absl::InvalidArgumentError("model.vocab missing");
  for (const auto& [tok, idj] : vocab->items()) {
    auto id = JsonInt(idj);
    if (!id.ok() || *id < 0 || *id > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat("bad id for token ", tok));
    }
    vocab_[tok] = static_cast<int32_t>(*id);
    if (static_cast<size_t>(*id) >= id_to_token_.size()) id_to_token_.resize(*id + 1);
    id_to_token_[*id] = tok;
  }
  const Json* merges = FindJson(*model, "merges");
  if (merges == nullptr || !merges->is_array()) return absl::InvalidArgumentError("model.merges missing");
  int32_t rank = 0;
  for (const Json& m : *merges) {
    std::string a, b;
    if (m.is_string()) {
      size_t sp = m.get<std::string>().find(' ');
      if (sp == std::string::npos) return absl::InvalidArgumentError(absl::StrCat("bad merge \"", m.get<std::string>(), "\""));
      a = m.get<std::string>().substr(0, sp);
      b = m.get<std::string>().substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError("merges entries must be \"a b\" or [a, b]");
    }
    auto ia = vocab_.find(a), ib = vocab_.find(b), iab = vocab_.find(a + b);
    if (ia == vocab_.end() || ib == vocab_.end() || iab == vocab_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("merge (", a, ", ", b, ") uses tokens missing from the vocab"));
    }
    merges_.emplace(PairKey(ia->second, ib->second), std::make_pair(rank++, iab->second));
  }
  if (const Json* unk = FindJson(*model, "unk_token"); unk != nullptr && unk->is_string()) {
    auto it = vocab_.find(unk->get<std::string>());
    if (it != vocab_.end()) unk_id_ = it->second;
  }

  if (const Json* added = FindJson(j, "added_tokens"); added != nullptr && added->is_array()) {
    for (const Json& a : *added) {
      AddedToken t;
      auto id = GetJsonInt(a, "id", -1);
      auto content = GetJsonString(a, "content", "");
      if (!id.ok() || *id < 0 || !content.ok() || content->empty()) {
        return absl::InvalidArgumentError("added_tokens entries need an id and a non-empty content");
      }
      t.id = static_cast<int32_t>(*id);
      t.content = *content;
      t.special = GetJsonBool(a, "special", false).value_or(false);
      t.lstrip = GetJsonBool(a, "lstrip", false).value_or(false);
      t.rstrip = GetJsonBool(a, "rstrip", false).value_or(false);
      t.normalized = GetJsonBool(a, "normalized", !t.special).value_or(!t.special);
      if (GetJsonBool(a, "single_word", false).value_or(false)) {
        return absl::UnimplementedError(absl::StrCat("added token ", t.content, ": single_word is not supported"));
      }
      if (static_cast<size_t>(t.id) >= id_to_token_.size()) id_to_token_.resize(t.id + 1);
      id_to_token_[t.id] = t.content;
      added_by_id_[t.id] = added_.size();
      added_.push_back(std::move(t));
    }
  }
  return absl::OkStatus();
}

int32_t Tokenizer::TokenId(absl::string_view token) const {
  for (const AddedToken& a : added_) {
    if (a.content == token) return a.id;
  }
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

template <typename Fn>
void Tokenizer::SplitAdded(absl::string_view text, bool normalized_pass, std::vector<int32_t>* out, Fn fn) const {
  size_t seg_start = 0, i = 0;
  while (i < text.size()) {
    const AddedToken* best = nullptr;
    for (const AddedToken& a : added_) {
      if (a.normalized != normalized_pass) continue;
      if (text.compare(i, a.content.size(), a.content) == 0 && (best == nullptr || a.content.size() > best->content.size())) {
        best = &a;
      }
    }
    if (best == nullptr) {
      ++i;
      continue;
    }
    size_t seg_end = i, after = i + best->content.size();
    if (best->lstrip) {
      while (seg_end > seg_start && absl::ascii_isspace(static_cast<unsigned char>(text[seg_end - 1]))) --seg_end;
    }
    if (best->rstrip) {
      while (after < text.size() && absl::ascii_isspace(static_cast<unsigned char>(text[after]))) ++after;
    }
    if (seg_end > seg_start) fn(text.substr(seg_start, seg_end - seg_start));
    out->push_back(best->id);
    seg_start = i = after;
  }
  if (seg_start < text.size()) fn(text.substr(seg_start));
}

std::vector<int32_t> Tokenizer::Encode(absl::string_view text) const {
  std::vector<int32_t> out;
  // Added tokens that match the raw text first; then normalize what is left.
  SplitAdded(text, /*normalized_pass=*/false, &out, [&](absl::string_view seg) { EncodeSegment(seg, &out); });
  return out;
}

void Tokenizer::EncodeSegment(absl::string_view text, std::vector<int32_t>* out) const {
  if (!nfc_) {
    SplitAdded(text, /*normalized_pass=*/true, out, [&](absl::string_view seg) { EncodeNormalized(seg, out); });
    return;
  }
  const std::string norm = NormalizeNfc(text);
  SplitAdded(norm, /*normalized_pass=*/true, out, [&](absl::string_view seg) { EncodeNormalized(seg, out); });
}

std::vector<std::string> Tokenizer::PreTokenize(absl::string_view text) const {
  std::vector<std::string> pieces;
  for (const auto& [b, e] : SplitPieces(DecodeUtf8(text), text.size(), max_digits_)) {
    pieces.emplace_back(text.substr(b, e - b));
  }
  return pieces;
}

void Tokenizer::EncodeNormalized(absl::string_view text, std::vector<int32_t>* out) const {
  for (const auto& [b, e] : SplitPieces(DecodeUtf8(text), text.size(), max_digits_)) {
    EncodePiece(text.substr(b, e - b), out);
  }
}

void Tokenizer::EncodePiece(absl::string_view piece, std::vector<int32_t>* out) const {
  std::string key(piece);
  {
    absl::MutexLock lock(&cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::string mapped;
  for (unsigned char c : piece) mapped += byte_char_[c];
  std::vector<int32_t> syms;
  auto whole = ignore_merges_ ? vocab_.find(mapped) : vocab_.end();
  if (whole != vocab_.end()) {
    syms.push_back(whole->second);
  } else {
    for (unsigned char c : piece) {
      auto it = vocab_.find(byte_char_[c]);
      if (it != vocab_.end()) {
        syms.push_back(it->second);
      } else if (unk_id_ >= 0) {
        syms.push_back(unk_id_);
      }
    }
    // Merge the lowest-ranked adjacent pair (leftmost on ties) until none applies.
    while (syms.size() > 1) {
      int32_t best_rank = std::numeric_limits<int32_t>::max(), best_id = -1;
      size_t best_pos = 0;
      for (size_t k = 0; k + 1 < syms.size(); ++k) {
        auto it = merges_.find(PairKey(syms[k], syms[k + 1]));
        if (it != merges_.end() && it->second.first < best_rank) {
          best_rank = it->second.first;
          best_id = it->second.second;
          best_pos = k;
        }
      }
      if (best_id < 0) break;
      syms[best_pos] = best_id;
      syms.erase(syms.begin() + best_pos + 1);
    }
  }
  out->insert(out->end(), syms.begin(), syms.end());
  absl::MutexLock lock(&cache_mu_);
  if (cache_.size() > 200000) cache_.clear();
  cache_.emplace(std::move(key), std::move(syms));
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) continue;
    if (auto it = added_by_id_.find(id); it != added_by_id_.end()) {
      if (!(skip_special && added_[it->second].special)) out += added_[it->second].content;
      continue;
    }
    for (const Codepoint& c : DecodeUtf8(id_to_token_[id])) {
      auto b = char_to_byte_.find(c.cp);
      if (b != char_to_byte_.end()) out.push_back(static_cast<char>(b->second));
    }
  }
  return out;
}

}  // namespace kernelrl::agent
