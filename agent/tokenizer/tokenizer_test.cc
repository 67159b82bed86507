// Token ids against HF `tokenizers` on 10,500 varied lines (code, unicode,
// whitespace runs, digits, special tokens), for a Qwen2-style (NFC, single
// digits) and a Llama-3-style (digit triples, ignore_merges) tokenizer.json
// trained at test time; round-trip decoding; clear errors on bad files.
#include "agent/tokenizer/tokenizer.h"

#include "gtest/gtest.h"
#include "common/json.h"
#include "common/file.h"
#include "agent/test_util.h"
#include "agent/tokenizer/unicode.h"

namespace kernelrl::agent {
namespace {

const Json& Fixtures() {
  static const Json* fx = [] {
    const std::string dir = testing::TempDir() + "/tokenizer_fixtures";
    EXPECT_EQ(testing::RunFixtureScript("agent/tokenizer/testdata/make_tokenizer_fixtures.py", dir), 0)
        << "see " << dir << ".log";
    auto text = ReadFileToString(dir + "/tokenizer_fixtures.json");
    EXPECT_TRUE(text.ok()) << text.status();
    auto j = ParseJson(*text);
    EXPECT_TRUE(j.ok()) << j.status();
    return new Json(*j);
  }();
  return *fx;
}

class TokenizerParityTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerParityTest, IdsEqualHuggingFaceOnVariedText) {
  const Json& fx = Fixtures();
  const Json* c = FindJson(*FindJson(fx, "cases"), GetParam());
  ASSERT_NE(c, nullptr);
  auto tok = Tokenizer::Load(FindJson(*c, "tokenizer")->get<std::string>());
  ASSERT_TRUE(tok.ok()) << tok.status();
  const Json& lines = *FindJson(fx, "lines");
  const Json& want = *FindJson(*c, "ids");
  ASSERT_EQ(lines.size(), want.size());
  ASSERT_GE(lines.size(), 10000u);
  int mismatches = 0;
  size_t tokens = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::vector<int32_t> expected;
    for (const Json& v : want[i]) expected.push_back(static_cast<int32_t>(*JsonInt(v)));
    std::vector<int32_t> got = (*tok)->Encode(lines[i].get<std::string>());
    tokens += got.size();
    if (got != expected && ++mismatches <= 5) {
      ADD_FAILURE() << "line " << i << " " << DumpJson(Json(lines[i].get<std::string>())) << ": ids differ from HF";
    }
    // Decoding gives back the (normalized) text.
    const std::string text = FindJson(*c, "nfc")->get<bool>() ? NormalizeNfc(lines[i].get<std::string>()) : lines[i].get<std::string>();
    if (mismatches == 0) {
      EXPECT_EQ((*tok)->Decode(got), text) << "line " << i;
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << lines.size() << " lines";
  EXPECT_GT(tokens, lines.size() * 3);
}

INSTANTIATE_TEST_SUITE_P(Styles, TokenizerParityTest, ::testing::Values("qwen2", "llama3"));

TEST(TokenizerTest, SpecialTokensAreSplitOutAndSkippable) {
  const Json& fx = Fixtures();
  auto tok = Tokenizer::Load(FindJson(*FindJson(*FindJson(fx, "cases"), "qwen2"), "tokenizer")->get<std::string>());
  ASSERT_TRUE(tok.ok()) << tok.status();
  const int32_t start = (*tok)->TokenId("<|im_start|>"), end = (*tok)->TokenId("<|im_end|>");
  ASSERT_GE(start, 0);
  ASSERT_GE(end, 0);
  auto ids = (*tok)->Encode("<|im_start|>user\nhi<|im_end|>");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), start);
  EXPECT_EQ(ids.back(), end);
  EXPECT_EQ((*tok)->Decode(ids, /*skip_special=*/true), "user\nhi");
}

TEST(TokenizerTest, UnsupportedOrBrokenFilesGiveClearErrors) {
  EXPECT_FALSE(Tokenizer::FromJson("{\"model\": ").ok());
  auto no_pre = Tokenizer::FromJson(R"({"model": {"type": "BPE", "vocab": {}, "merges": []}})");
  ASSERT_FALSE(no_pre.ok());
  EXPECT_NE(std::string(no_pre.status().message()).find("pre_tokenizer"), std::string::npos);
  const Json& fx = Fixtures();
  auto text = ReadFileToString(FindJson(*FindJson(*FindJson(fx, "cases"), "qwen2"), "tokenizer")->get<std::string>());
  ASSERT_TRUE(text.ok());
  auto truncated = Tokenizer::FromJson(absl::string_view(*text).substr(0, text->size() / 2));
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(std::string(truncated.status().message()).find("JSON parse error"), std::string::npos);
  EXPECT_EQ(Tokenizer::Load("/nonexistent/tokenizer.json").status().code(), absl::StatusCode::kNotFound);
}

TEST(UnicodeTest, NfcComposesAndReorders) {
  EXPECT_EQ(NormalizeNfc("e\xCC\x81"), "\xC3\xA9");                  // e + acute -> é
  EXPECT_EQ(NormalizeNfc("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");  // Hangul L+V -> 가
  // a + dot below (220) + acute (230) stays composed-with-acute order-independent.
  EXPECT_EQ(NormalizeNfc("a\xCC\x81\xCC\xA3"), NormalizeNfc("a\xCC\xA3\xCC\x81"));
  EXPECT_EQ(NormalizeNfc("plain ascii"), "plain ascii");
}

}  // namespace
}  // namespace kernelrl::agent
