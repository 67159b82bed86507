// Pre-training end to end on the CPU: the engineer corpus and its tokenizer,
// then a tiny model from scratch trained with the learner's SftStep. Its loss
// falls, its checkpoint loads as the learner and the policy server load one,
// with weights that differ from a fresh initialisation of the same seed, and
// SHA256SUMS names the files as written.
#include "tools/codemodel/pretrain.h"

#include <filesystem>
#include <random>
#include <set>
#include <string>

#include "agent/chat/tools.h"
#include "common/file.h"
#include "common/sha256.h"
#include "common/testing/testing.h"
#include "gtest/gtest.h"
#include "learner/model.h"
#include "tools/codemodel/corpus.h"
#include "tools/codemodel/render.h"
#include "tools/codemodel/test_tasks.h"
#include "tools/codemodel/tool_lines.h"

namespace kernelrl::codemodel {
namespace {

// A record longer than the model's positions is refused by name, not trained past them.
TEST(PretrainTest, ARecordLongerThanTheModelsPositionsIsRefused) {
  agent::EngineerPolicyOptions eo;
  eo.device = "cpu";
  eo.revisions = 0;
  auto corpus = MakeCorpus({testing::FirstTrainingTaskPerFamily("cpu")[0]}, 1, v1::RolloutConfig(), "", eo,
                           std::random_device{}(), kernelrl::testing::NewTempDir("pretrain_long_ws"));
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  const std::string dir = kernelrl::testing::NewTempDir("pretrain_long");
  ASSERT_TRUE(WriteFileAtomically(dir + "/corpus.jsonl", DumpJson(corpus->records[0]) + "\n").ok());
  auto tok = TrainRecordTokenizer(corpus->records, 300);
  ASSERT_TRUE(tok.ok()) << tok.status();
  ASSERT_TRUE(WriteFileAtomically(dir + "/tokenizer.json", *tok).ok());
  PretrainOptions o;
  o.corpus_dir = dir;
  o.out_dir = kernelrl::testing::NewTempDir("pretrain_long_ckpt");
  o.hidden = 32, o.layers = 1, o.heads = 2, o.kv_heads = 1, o.intermediate = 64;
  o.steps = 1, o.batch = 1, o.log_every = 0;
  o.max_position_embeddings = 256;  // an episode is over a thousand tokens
  auto r = Pretrain(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than max_position_embeddings (256)"), std::string::npos) << r.status();
}

TEST(PretrainTest, LossFallsAndTheCheckpointLoads) {
  const std::vector<v1::Task> tasks = testing::FirstTrainingTaskPerFamily("cpu");
  agent::EngineerPolicyOptions eo;
  eo.device = "cpu";
  eo.revisions = 0;  // Short episodes: a quick test.
  const uint64_t seed = std::random_device{}();
  auto corpus = MakeCorpus(tasks, 2, v1::RolloutConfig(), "", eo, seed, kernelrl::testing::NewTempDir("pretrain_ws"));
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  const std::string dir = kernelrl::testing::NewTempDir("pretrain_corpus");
  std::string lines;
  for (const Json& r : corpus->records) lines += DumpJson(r) + "\n";
  ASSERT_TRUE(WriteFileAtomically(dir + "/corpus.jsonl", lines).ok());
  auto tok = TrainRecordTokenizer(corpus->records, 768);  // As corpus_gen trains it.
  ASSERT_TRUE(tok.ok()) << tok.status();
  ASSERT_TRUE(WriteFileAtomically(dir + "/tokenizer.json", *tok).ok());
  const std::set<std::string> shapes = CorpusToolLineShapes(corpus->records);
  ASSERT_TRUE(WriteToolLineShapes(shapes, dir + "/" + kToolLineShapesFile).ok());

  PretrainOptions o;
  o.corpus_dir = dir;
  o.out_dir = kernelrl::testing::NewTempDir("pretrain_ckpt");
  o.hidden = 64, o.layers = 2, o.heads = 4, o.kv_heads = 2, o.intermediate = 176;
  o.steps = 8, o.batch = 2, o.lr = 1e-2, o.warmup_steps = 1, o.log_every = 0;
  o.seed = seed;
  auto r = Pretrain(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->losses.size(), 8u);
  EXPECT_EQ(r->samples, 6);
  EXPECT_GT(r->mean_model_tokens, 300);
  const double first = r->losses[0], last = (r->losses[6] + r->losses[7]) / 2;
  EXPECT_LT(last, first - 0.3) << "sft_loss " << first << " -> " << last;

  learner::ModelOptions mo;
  auto loaded = learner::Transformer::Load(o.out_dir, learner::Head::kLanguageModel, mo);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->config().vocab_size, (*agent::Tokenizer::FromJson(*tok))->vocab_size());
  auto fresh = learner::Transformer::Create((*loaded)->config(), learner::Head::kLanguageModel, mo, seed);
  ASSERT_TRUE(fresh.ok());
  const at::Tensor ids = at::randint(0, (*loaded)->config().vocab_size, {1, 16}, at::kLong);
  EXPECT_GT(((*loaded)->Logits(ids) - (*fresh)->Logits(ids)).abs().max().item<double>(), 1e-4);
  auto weights = ReadFileToString(o.out_dir + "/model.safetensors");
  ASSERT_TRUE(weights.ok());
  EXPECT_EQ(Sha256Hex(*weights), r->safetensors_sha256);
  auto sums = ReadFileToString(o.out_dir + "/SHA256SUMS");
  ASSERT_TRUE(sums.ok());
  EXPECT_NE(sums->find(r->safetensors_sha256 + "  model.safetensors"), std::string::npos) << *sums;
  EXPECT_TRUE(std::filesystem::exists(o.out_dir + "/tokenizer.json"));
  // The corpus's tool-line shapes travel with the base (design_report reads a run against them).
  auto travelled = ReadToolLineShapes(o.out_dir + "/" + kToolLineShapesFile);
  ASSERT_TRUE(travelled.ok()) << travelled.status();
  EXPECT_EQ(*travelled, shapes);

  // With train_rejected off, the replies a verdict rejected are read, not trained: fewer model tokens.
  int rejected = 0;
  for (const Json& rec : corpus->records) {
    for (const Json& m : *FindJson(rec, "messages")) rejected += FindJson(m, "rejected") != nullptr;
  }
  PretrainOptions read_only = o;
  read_only.out_dir = kernelrl::testing::NewTempDir("pretrain_read_only");
  read_only.steps = 1;
  read_only.train_rejected = false;
  auto r2 = Pretrain(read_only);
  ASSERT_TRUE(r2.ok()) << r2.status();
  if (rejected > 0) {
    EXPECT_LT(r2->mean_model_tokens, r->mean_model_tokens);
  } else {
    EXPECT_EQ(r2->mean_model_tokens, r->mean_model_tokens);
  }
}

}  // namespace
}  // namespace kernelrl::codemodel
