// A seeded generator whose draws are the same on every platform and standard
// library (std::uniform_*_distribution are not): candidate i of a run is a
// pure function of (seed, i), which is what makes a run resumable and
// reproducible.
#ifndef KERNELRL_DATA_RNG_H_
#define KERNELRL_DATA_RNG_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace kernelrl {

class Rng {
 public:
  // splitmix64 of (seed, stream) as the xorshift state.
  Rng(uint64_t seed, uint64_t stream);
  uint64_t Next();
  // Uniform in [0, n); n > 0.
  uint64_t Below(uint64_t n);
  // Uniform integer in [lo, hi].
  int64_t Range(int64_t lo, int64_t hi);
  // Uniform in [0, 1).
  double Uniform();
  bool Coin(double p_true) { return Uniform() < p_true; }
  // Index drawn proportionally to weights (all >= 0, sum > 0).
  size_t Weighted(const std::vector<double>& weights);
  template <typename T>
  const T& Pick(const std::vector<T>& v) {
    return v[Below(v.size())];
  }

 private:
  uint64_t s_[2];
};

// A rollout's sampling seed: item n of the stream `seed` (never 0, which asks a
// policy to draw its own). A job's n-th lease, an evaluation's k-th rollout of a task.
uint64_t SeedOf(uint64_t seed, uint64_t n);
// FNV-1a of `text`: the same on every platform and build (std::hash is not).
uint64_t StableHash(std::string_view text);

}  // namespace kernelrl

#endif  // KERNELRL_DATA_RNG_H_
