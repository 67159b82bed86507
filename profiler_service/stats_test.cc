#include "profiler_service/stats.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"

namespace kernelrl {
namespace {

TEST(Stats, MedianOddEvenAndUnsorted) {
  EXPECT_DOUBLE_EQ(Median({5, 1, 3}), 3);
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(Median({}), 0);
}

TEST(Stats, RelStdErrorMatchesDefinition) {
  const std::vector<double> v = {9, 10, 11, 10};
  const double mean = 10, sd = std::sqrt(2.0 / 3.0);
  EXPECT_NEAR(RelStdError(v), sd / 2.0 / mean, 1e-12);
  EXPECT_TRUE(std::isinf(RelStdError({10})));
  EXPECT_TRUE(std::isinf(RelStdError({0, 0})));
}

TEST(Stats, RelStdErrorShrinksAsOneOverSqrtN) {
  std::mt19937 rng(1234);
  std::normal_distribution<double> noise(100.0, 5.0);
  std::vector<double> small, large;
  for (int i = 0; i < 100; ++i) small.push_back(noise(rng));
  large = small;
  for (int i = 0; i < 9900; ++i) large.push_back(noise(rng));
  // 100x the samples: about a tenth of the error (within sampling noise).
  EXPECT_NEAR(RelStdError(large) / RelStdError(small), 0.1, 0.03);
}

}  // namespace
}  // namespace kernelrl
