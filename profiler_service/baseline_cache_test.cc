#include "profiler_service/baseline_cache.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/testing/testing.h"
#include "gtest/gtest.h"

namespace kernelrl {
namespace {

std::string TempRoot(const char* name) {
  std::string root = ::kernelrl::testing::TempDir() + "/" + name;
  std::filesystem::remove_all(root);
  return root;
}

Baseline Entry(const std::string& hash, double eager) {
  Baseline b;
  b.set_task_id("level1/19_ReLU");
  b.set_task_hash(hash);
  b.set_gpu_model("NVIDIA H100 80GB HBM3");
  b.set_torch_version("2.11.0+cu130");
  b.set_input_policy_hash("p1");
  b.mutable_eager()->set_median_us(eager);
  b.mutable_compiled()->set_median_us(eager * 0.8);
  return b;
}

TEST(BaselineCache, PutThenGetRoundTripsUnderTheFullKey) {
  BaselineCache cache(TempRoot("bc1"));
  ASSERT_TRUE(cache.Put(Entry("h1", 123.5)).ok());
  auto got = cache.Get({"h1", "NVIDIA H100 80GB HBM3", "2.11.0+cu130", "p1"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_DOUBLE_EQ(got->eager().median_us(), 123.5);
  // Any other key component misses.
  EXPECT_TRUE(absl::IsNotFound(cache.Get({"h1", "NVIDIA H200", "2.11.0+cu130", "p1"}).status()));
  EXPECT_TRUE(absl::IsNotFound(cache.Get({"h1", "NVIDIA H100 80GB HBM3", "2.10", "p1"}).status()));
  EXPECT_TRUE(absl::IsNotFound(cache.Get({"h1", "NVIDIA H100 80GB HBM3", "2.11.0+cu130", "p2"}).status()));
  EXPECT_TRUE(absl::IsNotFound(cache.Get({"h2", "NVIDIA H100 80GB HBM3", "2.11.0+cu130", "p1"}).status()));
}

TEST(BaselineCache, ReplaceAndSanitisedPaths) {
  const std::string root = TempRoot("bc2");
  BaselineCache cache(root);
  ASSERT_TRUE(cache.Put(Entry("../../etc/x", 1.0)).ok());
  ASSERT_TRUE(cache.Put(Entry("../../etc/x", 2.0)).ok());
  const std::string path = cache.PathFor({"../../etc/x", "NVIDIA H100 80GB HBM3", "2.11.0+cu130", "p1"});
  // No component is "..": the file stays under the root.
  EXPECT_EQ(path.find("/../"), std::string::npos) << path;
  EXPECT_EQ(std::filesystem::path(path).parent_path().parent_path().parent_path().string(), root);
  EXPECT_TRUE(std::filesystem::exists(path));
  auto got = cache.Get(BaselineCache::KeyOf(Entry("../../etc/x", 0)));
  ASSERT_TRUE(got.ok());
  EXPECT_DOUBLE_EQ(got->eager().median_us(), 2.0);
}

TEST(BaselineCache, CorruptFileIsDataLossAndIncompleteKeyIsRejected) {
  BaselineCache cache(TempRoot("bc3"));
  ASSERT_TRUE(cache.Put(Entry("h3", 5.0)).ok());
  const BaselineKey key = BaselineCache::KeyOf(Entry("h3", 5.0));
  std::ofstream(cache.PathFor(key), std::ios::trunc) << "eager { median_us: ";
  EXPECT_TRUE(absl::IsDataLoss(cache.Get(key).status()));
  Baseline bad = Entry("", 1.0);
  EXPECT_TRUE(absl::IsInvalidArgument(cache.Put(bad)));
}

}  // namespace
}  // namespace kernelrl
