// safetensors: round trip (single file and sharded), and corrupted or
// truncated files rejected with errors that say what is wrong.
#include "learner/safetensors.h"

#include <sys/stat.h>

#include <cstring>
#include <random>

#include "gtest/gtest.h"
#include "common/json.h"
#include "learner/test_util.h"

namespace kernelrl::learner {
namespace {

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::string Dir(const std::string& name) {
  std::string d = testing::TempDir() + "/" + name;
  ::mkdir(d.c_str(), 0755);
  return d;
}

TEST(SafetensorsTest, RoundTripsTensorsAndMetadata) {
  auto a = RandomFloats(6 * 5, 1);
  std::vector<uint16_t> b = {1, 2, 3, 65535};
  const std::string path = Dir("rt") + "/x.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {{"w.a", DType::kF32, {6, 5}, a.data(), a.size() * 4},
                                      {"w.b", DType::kBF16, {4}, b.data(), 8},
                                      {"empty", DType::kF32, {0, 3}, nullptr, 0}},
                               {{"format", "pt"}})
                  .ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  const TensorView* va = (*f)->Find("w.a");
  ASSERT_NE(va, nullptr);
  EXPECT_EQ(va->shape, (std::vector<int64_t>{6, 5}));
  EXPECT_EQ(va->dtype, DType::kF32);
  EXPECT_EQ(std::memcmp(va->data, a.data(), a.size() * 4), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(va->data) % 8, 0u) << "data not 8-byte aligned";
  EXPECT_EQ(std::memcmp((*f)->Find("w.b")->data, b.data(), 8), 0);
  EXPECT_EQ((*f)->Find("empty")->nbytes, 0u);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
}

TEST(SafetensorsTest, ShardedDirectoryRoundTrips) {
  std::vector<std::vector<float>> data;
  std::vector<TensorToWrite> ts;
  for (int i = 0; i < 7; ++i) data.push_back(RandomFloats(100, i));
  for (int i = 0; i < 7; ++i) ts.push_back({"t" + std::to_string(i), DType::kF32, {10, 10}, data[i].data(), 400});
  const std::string dir = Dir("sharded");
  ASSERT_TRUE(WriteSafetensorsDir(dir, ts, 1000).ok());
  auto idx = ReadFileToString(dir + "/model.safetensors.index.json");
  ASSERT_TRUE(idx.ok()) << "expected shards";
  auto d = SafetensorsDir::Open(dir);
  ASSERT_TRUE(d.ok()) << d.status();
  for (int i = 0; i < 7; ++i) {
    const TensorView* v = (*d)->Find("t" + std::to_string(i));
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(std::memcmp(v->data, data[i].data(), 400), 0);
  }
}

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto a = RandomFloats(64, 7);
    path_ = Dir("corrupt") + "/good.safetensors";
    ASSERT_TRUE(WriteSafetensors(path_, {{"a", DType::kF32, {8, 8}, a.data(), 256}}).ok());
    good_ = *ReadFileToString(path_);
  }
  // Writes bytes to a file and returns the Open error message (empty if it opened).
  std::string OpenError(const std::string& bytes) {
    const std::string p = path_ + ".bad";
    EXPECT_TRUE(WriteFileAtomically(p, bytes).ok());
    auto f = SafetensorsFile::Open(p);
    if (f.ok()) return "";
    EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss) << f.status();
    return std::string(f.status().message());
  }
  std::string path_, good_;
};

TEST_F(CorruptionTest, TruncatedData) {
  EXPECT_NE(OpenError(good_.substr(0, good_.size() - 10)).find("truncated"), std::string::npos);
}

TEST_F(CorruptionTest, TruncatedHeader) {
  EXPECT_NE(OpenError(good_.substr(0, 20)).find("header length"), std::string::npos);
  EXPECT_NE(OpenError(good_.substr(0, 5)).find("shorter than the 8-byte"), std::string::npos);
}

TEST_F(CorruptionTest, GarbageHeaderJson) {
  std::string bad = good_;
  bad[8] = '{';
  bad[9] = '!';
  EXPECT_NE(OpenError(bad).find("JSON parse error"), std::string::npos);
}

TEST_F(CorruptionTest, HugeHeaderLength) {
  std::string bad = good_;
  bad[6] = '\x7f';
  EXPECT_NE(OpenError(bad).find("exceeds"), std::string::npos);
}

TEST_F(CorruptionTest, ShapeDtypeMismatchAndOverlaps) {
  auto header = [](const std::string& json, size_t data) {
    std::string h = json;
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
    return out + h + std::string(data, '\x01');
  };
  EXPECT_NE(OpenError(header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)).find("shape x dtype"),
            std::string::npos);
  EXPECT_NE(OpenError(header(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8)).find("dtype"),
            std::string::npos);
  EXPECT_NE(OpenError(header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                             12))
                .find("overlap"),
            std::string::npos);
  EXPECT_NE(OpenError(header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8)).find("hole"),
            std::string::npos);
  EXPECT_NE(OpenError(header(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0)).find("non-negative"),
            std::string::npos);
  EXPECT_EQ(OpenError(header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8)), "");
}

TEST(SafetensorsTest, MissingFileIsNotFound) {
  EXPECT_EQ(SafetensorsFile::Open("/nonexistent/x.safetensors").status().code(), absl::StatusCode::kNotFound);
}

TEST(SafetensorsTest, ShardIndexMismatchIsReported) {
  std::vector<float> a = RandomFloats(4, 1);
  const std::string dir = Dir("badindex");
  ASSERT_TRUE(WriteSafetensors(dir + "/s1.safetensors", {{"a", DType::kF32, {4}, a.data(), 16}}).ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/model.safetensors.index.json",
                                  R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})")
                  .ok());
  auto d = SafetensorsDir::Open(dir);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(std::string(d.status().message()).find("lacks it"), std::string::npos) << d.status();
}

TEST(JsonTest, ParsesEscapesAndRejectsGarbage) {
  auto j = ParseJson(R"({"s": "a\u00e9\ud83d\ude00\n", "n": -12, "f": 1.5e3, "l": [true, null]})");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(FindJson(*j, "s")->get<std::string>(), "a\xC3\xA9\xF0\x9F\x98\x80\n");
  EXPECT_EQ(*JsonInt(*FindJson(*j, "n")), -12);
  EXPECT_EQ(JsonNumber(*FindJson(*j, "f")), 1500.0);
  EXPECT_FALSE(ParseJson("{\"a\": 1,}").ok());
  EXPECT_FALSE(ParseJson("[1 2]").ok());
  EXPECT_FALSE(ParseJson("\"\\ud800\"").ok());
  auto round = ParseJson(DumpJson(*j, 2));
  ASSERT_TRUE(round.ok());
  EXPECT_EQ(DumpJson(*round), DumpJson(*j));
}

}  // namespace
}  // namespace kernelrl::learner
