#include "agent/tokenizer/unicode.h"

#include <algorithm>

namespace kernelrl::agent {
namespace {

using namespace unicode_tables;  // NOLINT: generated table names.

bool InRanges(const CodepointRange* r, size_t n, uint32_t cp) {
  const CodepointRange* end = r + n;
  const CodepointRange* it = std::upper_bound(r, end, cp, [](uint32_t v, const CodepointRange& x) { return v < x.first; });
  return it != r && (it - 1)->last >= cp;
}

uint8_t Ccc(uint32_t cp) {
  if (cp < 0x300) return 0;
  const CombiningClass* end = kCombiningClasses + kCombiningClassesSize;
  const CombiningClass* it =
      std::lower_bound(kCombiningClasses, end, cp, [](const CombiningClass& x, uint32_t v) { return x.cp < v; });
  return it != end && it->cp == cp ? it->ccc : 0;
}

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

void Decompose(uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  if (cp >= 0xC0) {
    const Decomposition* end = kDecompositions + kDecompositionsSize;
    const Decomposition* it =
        std::lower_bound(kDecompositions, end, cp, [](const Decomposition& x, uint32_t v) { return x.cp < v; });
    if (it != end && it->cp == cp) {
      out->insert(out->end(), it->to, it->to + it->n);
      return;
    }
  }
  out->push_back(cp);
}

// 0 if (a, b) has no primary composite.
uint32_t Compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const Composition* end = kCompositions + kCompositionsSize;
  const Composition* it = std::lower_bound(kCompositions, end, std::make_pair(a, b), [](const Composition& x, const std::pair<uint32_t, uint32_t>& v) {
    return x.a < v.first || (x.a == v.first && x.b < v.second);
  });
  return it != end && it->a == a && it->b == b ? it->composite : 0;
}

}  // namespace

std::vector<Codepoint> DecodeUtf8(absl::string_view s) {
  std::vector<Codepoint> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    uint8_t c = p[i];
    uint32_t cp = 0xFFFD;
    uint32_t len = 1;
    auto cont = [&](size_t k) { return i + k < n && (p[i + k] & 0xC0) == 0x80; };
    if (c < 0x80) {
      cp = c;
    } else if ((c & 0xE0) == 0xC0 && c >= 0xC2 && cont(1)) {
      cp = ((c & 0x1F) << 6) | (p[i + 1] & 0x3F);
      len = 2;
    } else if ((c & 0xF0) == 0xE0 && cont(1) && cont(2)) {
      uint32_t v = ((c & 0x0F) << 12) | ((p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F);
      if (v >= 0x800 && !(v >= 0xD800 && v <= 0xDFFF)) {
        cp = v;
        len = 3;
      }
    } else if ((c & 0xF8) == 0xF0 && cont(1) && cont(2) && cont(3)) {
      uint32_t v = ((c & 0x07) << 18) | ((p[i + 1] & 0x3F) << 12) | ((p[i + 2] & 0x3F) << 6) | (p[i + 3] & 0x3F);
      if (v >= 0x10000 && v <= 0x10FFFF) {
        cp = v;
        len = 4;
      }
    }
    out.push_back({cp, static_cast<uint32_t>(i), len});
    i += len;
  }
  return out;
}


bool IsLetter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return InRanges(kLetters, kLettersSize, cp);
}

bool IsNumber(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return InRanges(kNumbers, kNumbersSize, cp);
}

bool IsWhiteSpace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x9 && cp <= 0xD);
  return InRanges(kWhiteSpace, kWhiteSpaceSize, cp);
}

std::string NormalizeNfc(absl::string_view s) {
  bool ascii = true;
  for (char c : s) {
    if (static_cast<uint8_t>(c) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return std::string(s);
  // 1. Full canonical decomposition.
  std::vector<uint32_t> d;
  for (const Codepoint& c : DecodeUtf8(s)) Decompose(c.cp, &d);
  // 2. Canonical ordering: stable sort of each run of non-starters by class.
  for (size_t i = 0; i < d.size();) {
    if (Ccc(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && Ccc(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + i, d.begin() + j, [](uint32_t a, uint32_t b) { return Ccc(a) < Ccc(b); });
    i = j;
  }
  // 3. Canonical composition: a character joins the last starter unless
  // blocked by an intervening character of equal or higher class (or a starter).
  std::vector<uint32_t> r;
  r.reserve(d.size());
  long starter = -1;
  int last_class = 0;
  for (uint32_t cp : d) {
    const int cc = Ccc(cp);
    if (starter >= 0 && (last_class < cc || last_class == 0)) {
      if (uint32_t comp = Compose(r[starter], cp); comp != 0 && !(last_class == 0 && static_cast<long>(r.size()) - 1 != starter)) {
        r[starter] = comp;
        continue;
      }
    }
    if (cc == 0) starter = static_cast<long>(r.size());
    last_class = cc;
    r.push_back(cp);
  }
  std::string out;
  out.reserve(s.size());
  for (uint32_t cp : r) AppendUtf8(cp, &out);
  return out;
}

}  // namespace kernelrl::agent
