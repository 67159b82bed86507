#include "common/json.h"

#include <cstdint>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace kernelrl {
namespace {

TEST(JsonTest, RoundTripsIntegersExactlyAndKeepsKeyOrder) {
  std::mt19937_64 rng(std::random_device{}());
  Json doc = Json::object();
  std::vector<std::string> keys;
  for (int i = 0; i < 50; ++i) {
    const int64_t v = static_cast<int64_t>(rng());
    const std::string key = "k" + std::to_string(rng() % 1000000) + "_" + std::to_string(i);
    keys.push_back(key);
    doc[key] = v;
  }
  auto back = ParseJson(DumpJson(doc, 2));
  ASSERT_TRUE(back.ok()) << back.status();
  size_t i = 0;
  for (const auto& [key, value] : back->items()) {
    ASSERT_LT(i, keys.size());
    EXPECT_EQ(key, keys[i]);
    auto n = JsonInt(value);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, doc[key].get<int64_t>());
    ++i;
  }
  EXPECT_EQ(i, keys.size());
}

TEST(JsonTest, ParseErrorsNameTheByte) {
  auto r = ParseJson("{\"a\": [1, 2,, 3]}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("at byte 13"), std::string::npos) << r.status();
  EXPECT_FALSE(ParseJson("{\"a\": 1} trailing").ok());
  EXPECT_FALSE(ParseJson("").ok());
}

TEST(JsonTest, RepeatedKeysAreRejectedAtAnyDepth) {
  auto top = ParseJson(R"({"a": 1, "b": 2, "a": 3})");
  ASSERT_FALSE(top.ok());
  EXPECT_NE(top.status().message().find("\"a\""), std::string::npos) << top.status();
  EXPECT_FALSE(ParseJson(R"({"x": [{"k": 1, "k": 2}]})").ok());
  // The same key in sibling objects is not a repeat.
  EXPECT_TRUE(ParseJson(R"({"x": {"k": 1}, "y": {"k": 2}, "z": [{"k": 3}, {"k": 4}]})").ok());
}

TEST(JsonTest, TypedGettersUseDefaultsOnlyForAbsentOrNull) {
  auto doc = ParseJson(R"({"i": 7, "f": 3.0, "h": 2.5, "b": true, "s": "x", "n": null})");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(*GetJsonInt(*doc, "i", -1), 7);
  EXPECT_EQ(*GetJsonInt(*doc, "f", -1), 3);  // An integral float is an integer.
  EXPECT_FALSE(GetJsonInt(*doc, "h", -1).ok());
  EXPECT_FALSE(GetJsonInt(*doc, "s", -1).ok());
  EXPECT_EQ(*GetJsonInt(*doc, "n", -1), -1);
  EXPECT_EQ(*GetJsonInt(*doc, "absent", 11), 11);
  EXPECT_DOUBLE_EQ(*GetJsonDouble(*doc, "h", 0), 2.5);
  EXPECT_DOUBLE_EQ(*GetJsonDouble(*doc, "i", 0), 7.0);
  EXPECT_FALSE(GetJsonDouble(*doc, "b", 0).ok());
  EXPECT_TRUE(*GetJsonBool(*doc, "b", false));
  EXPECT_FALSE(GetJsonBool(*doc, "i", false).ok());
  EXPECT_EQ(*GetJsonString(*doc, "s", ""), "x");
  EXPECT_EQ(*GetJsonString(*doc, "absent", "d"), "d");
  EXPECT_FALSE(GetJsonString(*doc, "i", "").ok());
  EXPECT_EQ(FindJson(Json::array({1, 2}), "i"), nullptr);
}

TEST(JsonTest, UnsignedBeyondInt64IsNotAnInt64) {
  auto doc = ParseJson("18446744073709551615");
  ASSERT_TRUE(doc.ok());
  EXPECT_FALSE(JsonInt(*doc).ok());
}

TEST(JsonTest, DumpReplacesInvalidUtf8InsteadOfThrowing) {
  std::mt19937 rng(std::random_device{}());
  std::string bytes;
  for (int i = 0; i < 64; ++i) bytes.push_back(static_cast<char>(rng() % 256));
  bytes.push_back('\xff');  // Never valid UTF-8.
  const std::string dumped = DumpJson(Json(bytes));
  auto back = ParseJson(dumped);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_NE(back->get<std::string>().find("\xEF\xBF\xBD"), std::string::npos);
  EXPECT_EQ(JsonString("a\"b\n\x01"), "\"a\\\"b\\n\\u0001\"");
}

}  // namespace
}  // namespace kernelrl
