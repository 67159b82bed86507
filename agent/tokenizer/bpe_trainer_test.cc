// The BPE trainer: its tokenizer.json loads in the C++ Tokenizer and in HF
// `tokenizers` with the same ids, round-trips any text, compresses the text it
// was trained on, keeps the ChatML markers whole, and is deterministic.
#include "agent/tokenizer/bpe_trainer.h"

#include <filesystem>
#include <random>

#include "agent/test_util.h"
#include "agent/tokenizer/tokenizer.h"
#include "common/file.h"
#include "common/json.h"
#include "gtest/gtest.h"

namespace kernelrl::agent {
namespace {

// Kernel-like documents from a fresh seed: identifiers, numbers, JSON, ChatML markers.
std::vector<std::string> Corpus(uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  const std::vector<std::string> words = {"__global__", "void", "float4", "blockIdx.x", "threadIdx.x", "BLOCK",
                                          "#define", "return", "torch", "kernel", "Write", "Profile", "café", "日本"};
  std::vector<std::string> docs;
  for (int d = 0; d < n; ++d) {
    std::string s = "<|im_start|>assistant\n<tool_call>\n{\"name\": \"Write\", \"arguments\": {\"path\": \"k.cu\"}}\n";
    for (int i = 0; i < 60; ++i) {
      s += words[rng() % words.size()];
      s += (rng() % 5 == 0) ? "\n  " : " ";
      if (rng() % 7 == 0) s += std::to_string(rng() % 100000);
    }
    s += "</tool_call><|im_end|>\n";
    docs.push_back(std::move(s));
  }
  return docs;
}

TEST(BpeTrainerTest, LoadsRoundTripsAndCompresses) {
  const std::vector<std::string> docs = Corpus(std::random_device{}(), 200);
  BpeTrainerOptions o;
  o.vocab_size = 600;
  auto json = TrainBpe(docs, o);
  ASSERT_TRUE(json.ok()) << json.status();
  auto tok = Tokenizer::FromJson(*json);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_LE((*tok)->vocab_size(), 600 + static_cast<int>(ChatSpecialTokens().size()));
  EXPECT_GT((*tok)->vocab_size(), 300);  // Merges were learned.
  for (const std::string& s : ChatSpecialTokens()) EXPECT_GE((*tok)->TokenId(s), 256) << s;
  size_t bytes = 0, ids = 0;
  for (const std::string& d : docs) {
    const std::vector<int32_t> e = (*tok)->Encode(d);
    EXPECT_EQ((*tok)->Decode(e), d);
    bytes += d.size();
    ids += e.size();
  }
  EXPECT_LT(ids * 3, bytes) << "fewer than 3 bytes per token on the training text";
  // Unseen text (bytes never merged) still round-trips.
  const std::string unseen = "ünïcödé \x01\x7f tabs\t\t and 😀 <|im_end|> done";
  EXPECT_EQ((*tok)->Decode((*tok)->Encode(unseen)), unseen);
  const std::vector<int32_t> marker = (*tok)->Encode("<|im_end|>");
  ASSERT_EQ(marker.size(), 1u);
  EXPECT_EQ(marker[0], (*tok)->TokenId("<|im_end|>"));
  // Deterministic: the same corpus gives the same file.
  auto again = TrainBpe(docs, o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *json);
}

TEST(BpeTrainerTest, HuggingFaceReadsTheSameIds) {
  const std::vector<std::string> docs = Corpus(std::random_device{}(), 100);
  BpeTrainerOptions o;
  o.vocab_size = 500;
  auto json = TrainBpe(docs, o);
  ASSERT_TRUE(json.ok()) << json.status();
  const std::string dir = testing::TempDir() + "/bpe_hf";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteFileAtomically(dir + "/tokenizer.json", *json).ok());
  std::vector<std::string> lines = Corpus(std::random_device{}(), 20);
  lines.push_back("naïve  spaces\n\n\tand 12345 digits");
  Json arr = Json::array();
  for (const std::string& l : lines) arr.push_back(Json(l));
  ASSERT_TRUE(WriteFileAtomically(dir + "/lines.json", DumpJson(arr)).ok());
  ASSERT_EQ(testing::RunFixtureScript("agent/tokenizer/testdata/hf_encode.py", dir), 0) << "see " << dir << ".log";
  auto text = ReadFileToString(dir + "/ids.json");
  ASSERT_TRUE(text.ok()) << text.status();
  auto want = ParseJson(*text);
  ASSERT_TRUE(want.ok());
  auto tok = Tokenizer::FromJson(*json);
  ASSERT_TRUE(tok.ok());
  ASSERT_TRUE(want->is_array());
  ASSERT_EQ(want->size(), lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    std::vector<int32_t> hf;
    for (const Json& v : (*want)[i]) hf.push_back(static_cast<int32_t>(*JsonInt(v)));
    EXPECT_EQ((*tok)->Encode(lines[i]), hf) << "line " << i;
  }
}

}  // namespace
}  // namespace kernelrl::agent
