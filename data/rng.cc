#include "data/rng.h"

namespace kernelrl {
namespace {

uint64_t SplitMix(uint64_t* x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

Rng::Rng(uint64_t seed, uint64_t stream) {
  uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ull);
  s_[0] = SplitMix(&x);
  s_[1] = SplitMix(&x);
  if (s_[0] == 0 && s_[1] == 0) s_[1] = 1;
}

uint64_t Rng::Next() {  // xorshift128+
  uint64_t s1 = s_[0];
  const uint64_t s0 = s_[1];
  s_[0] = s0;
  s1 ^= s1 << 23;
  s_[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
  return s_[1] + s0;
}

uint64_t Rng::Below(uint64_t n) { return n <= 1 ? 0 : Next() % n; }

int64_t Rng::Range(int64_t lo, int64_t hi) {
  return hi <= lo ? lo : lo + static_cast<int64_t>(Below(static_cast<uint64_t>(hi - lo) + 1));
}

double Rng::Uniform() { return static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0); }

size_t Rng::Weighted(const std::vector<double>& weights) {
  double total = 0;
  for (double w : weights) total += w > 0 ? w : 0;
  if (total <= 0 || weights.empty()) return 0;
  double r = Uniform() * total;
  for (size_t i = 0; i < weights.size(); ++i) {
    const double w = weights[i] > 0 ? weights[i] : 0;
    if (r < w) return i;
    r -= w;
  }
  return weights.size() - 1;
}

uint64_t SeedOf(uint64_t seed, uint64_t n) {
  const uint64_t s = Rng(seed, n).Next();
  return s == 0 ? 1 : s;
}

uint64_t StableHash(std::string_view text) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

}  // namespace kernelrl
