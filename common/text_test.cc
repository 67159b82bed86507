#include "common/text.h"

#include <regex>

#include "common/clock.h"
#include "gtest/gtest.h"

namespace kernelrl {
namespace {

TEST(TextTest, Utf8EncodesEveryLength) {
  std::string s;
  for (uint32_t cp : {0x41u, 0xE9u, 0x20ACu, 0x1F600u}) AppendUtf8(cp, &s);
  EXPECT_EQ(s, "A\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
}

TEST(TextTest, ShellQuoteSurvivesQuotes) {
  EXPECT_EQ(ShellQuote("plain"), "'plain'");
  EXPECT_EQ(ShellQuote("it's; rm -rf /"), "'it'\\''s; rm -rf /'");
}

TEST(ClockTest, FormatsAndMoves) {
  EXPECT_TRUE(std::regex_match(NowRfc3339(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")));
  const double a = MonotonicMs();
  EXPECT_GE(MonotonicMs(), a);
}

}  // namespace
}  // namespace kernelrl
