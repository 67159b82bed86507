// LoRA adapters (ModelOptions::lora_rank): fresh ones change nothing; only
// they (and a critic's head) take gradients; save -> load is exact; a loader
// without adapters gets the merged policy, and PEFT reads the files we write
// to the same logits.
#include <c10/core/GradMode.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/file.h"
#include "common/json.h"
#include "gtest/gtest.h"
#include "learner/model.h"
#include "learner/model_test_util.h"
#include "learner/test_util.h"

namespace kernelrl::learner {
namespace {

using testing::RunFixtureScript;
using testing::TempDir;

constexpr int64_t kRank = 4;

std::unique_ptr<Transformer> Tiny(Head head, int64_t rank, bool trainable = true) {
  ModelOptions o;
  o.trainable = trainable;
  o.lora_rank = rank;
  o.lora_alpha = 8;
  o.lora_seed = 3;
  auto m = Transformer::Create(testing::TinyQwen2Config(97), head, o, 5);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// Adapters as a few steps of training would leave them: every B nonzero.
void PerturbAdapters(Transformer& m) {
  at::NoGradGuard no_grad;
  at::manual_seed(17);
  for (const Transformer::Layer& l : m.layers()) {
    for (const at::Tensor* b : {&l.qkv_lora_b, &l.o_lora_b, &l.gate_up_lora_b, &l.down_lora_b}) {
      b->uniform_(-0.2, 0.2);
    }
  }
}

at::Tensor Ids() {
  at::manual_seed(23);
  return at::randint(0, 97, {2, 9}, at::kLong);
}

at::Tensor LogitsOf(const Transformer& m) {
  c10::AutoGradMode no_grad(false);
  return m.Logits(Ids());
}

std::string NewDir(const std::string& name) {
  const std::string dir = ::kernelrl::testing::NewTempDir("lora_test_") + "/" + name;
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

TEST(LoraTest, FreshAdaptersChangeNothingAndAreTheOnlyParameters) {
  auto base = Tiny(Head::kLanguageModel, 0);
  auto lora = Tiny(Head::kLanguageModel, kRank);
  ASSERT_TRUE(base && lora);
  EXPECT_TRUE(at::equal(LogitsOf(*lora), LogitsOf(*base)));  // B = 0: W x + 0.
  const int64_t layers = lora->config().num_layers;
  EXPECT_EQ(lora->parameters().size(), static_cast<size_t>(8 * layers));
  for (const at::Tensor& p : lora->parameters()) {
    EXPECT_TRUE(p.requires_grad());
    EXPECT_TRUE(p.size(0) == kRank || p.size(1) == kRank) << p.sizes();
  }
  EXPECT_FALSE(lora->layers()[0].qkv_w.requires_grad());
  EXPECT_FALSE(lora->root_weights().embed.requires_grad());
  EXPECT_DOUBLE_EQ(lora->lora_scale(), 8.0 / kRank);
  // A critic with adapters also trains its value head.
  auto critic = Tiny(Head::kValue, kRank);
  ASSERT_TRUE(critic);
  const auto cp = critic->parameters();
  ASSERT_EQ(cp.size(), static_cast<size_t>(8 * layers + 2));
  EXPECT_TRUE(cp[cp.size() - 2].is_same(critic->root_weights().score_w));
}

TEST(LoraTest, OnlyAdaptersTakeGradientsAndCheckpointingGivesTheSame) {
  auto m = Tiny(Head::kLanguageModel, kRank);
  ASSERT_TRUE(m);
  PerturbAdapters(*m);  // With B = 0 no gradient would reach A.
  const at::Tensor ids = Ids();
  auto grads = [&](bool checkpointing) {
    m->set_activation_checkpointing(checkpointing);
    return testing::NextTokenGradients(*m, ids);
  };
  const auto plain = grads(false), checkpointed = grads(true);
  ASSERT_EQ(plain.size(), checkpointed.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_GT(plain[i].abs().sum().item<double>(), 0.0) << "adapter " << i << " got no gradient";
    EXPECT_LE((plain[i] - checkpointed[i]).abs().max().item<double>(), 1e-6) << "adapter " << i;
  }
  EXPECT_FALSE(m->layers()[0].qkv_w.grad().defined());
  EXPECT_FALSE(m->root_weights().embed.grad().defined());
}

TEST(LoraTest, MergedWeightsGiveTheAdaptedLogits) {
  auto m = Tiny(Head::kLanguageModel, kRank, /*trainable=*/false);
  ASSERT_TRUE(m);
  PerturbAdapters(*m);
  const at::Tensor adapted = LogitsOf(*m);
  auto base = Tiny(Head::kLanguageModel, 0, false);
  EXPECT_GT((adapted - LogitsOf(*base)).abs().max().item<double>(), 1e-3) << "the adapters change nothing";
  m->MergeAdapters();
  EXPECT_FALSE(m->has_adapters());
  EXPECT_FALSE(m->layers()[0].qkv_lora_a.defined());
  EXPECT_LE((LogitsOf(*m) - adapted).abs().max().item<double>(), 1e-5);
}

TEST(LoraTest, SaveLoadIsExactAndALoaderWithoutAdaptersGetsTheMergedPolicy) {
  auto m = Tiny(Head::kLanguageModel, kRank);
  ASSERT_TRUE(m);
  PerturbAdapters(*m);
  const at::Tensor adapted = LogitsOf(*m);
  const std::string dir = NewDir("policy");
  ASSERT_TRUE(m->Save(dir).ok());
  EXPECT_EQ(::access((dir + "/adapter_model.safetensors").c_str(), F_OK), 0);
  auto cfg = ReadFileToString(dir + "/adapter_config.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto j = ParseJson(*cfg);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(*GetJsonString(*j, "peft_type", ""), "LORA");
  EXPECT_EQ(*GetJsonInt(*j, "r", 0), kRank);
  EXPECT_EQ(*GetJsonDouble(*j, "lora_alpha", 0), 8.0);

  // Resumed with adapters: every base weight and adapter bit for bit.
  ModelOptions with;
  with.trainable = true;
  with.lora_rank = kRank;
  auto back = Transformer::Load(dir, Head::kLanguageModel, with);
  ASSERT_TRUE(back.ok()) << back.status();
  const auto a = m->parameters(), b = (*back)->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << "adapter " << i;
  const auto ha = m->HFTensors(), hb = (*back)->HFTensors();
  for (size_t i = 0; i < ha.size(); ++i) EXPECT_TRUE(at::equal(ha[i].second, hb[i].second)) << ha[i].first;
  EXPECT_TRUE(at::equal(LogitsOf(**back), adapted));

  // An engine's load (no adapters asked for): the merged policy.
  auto merged = Transformer::Load(dir, Head::kLanguageModel, {});
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_FALSE((*merged)->has_adapters());
  EXPECT_LE((LogitsOf(**merged) - adapted).abs().max().item<double>(), 1e-5);
  // SaveMerged: plain weights, no adapter files.
  const std::string plain = NewDir("merged");
  ASSERT_TRUE(m->SaveMerged(plain).ok());
  EXPECT_NE(::access((plain + "/adapter_config.json").c_str(), F_OK), 0);
  auto reread = Transformer::Load(plain, Head::kLanguageModel, {});
  ASSERT_TRUE(reread.ok()) << reread.status();
  EXPECT_LE((LogitsOf(**reread) - adapted).abs().max().item<double>(), 1e-5);

  // Adapters of another rank than asked for: refused, naming both.
  ModelOptions other = with;
  other.lora_rank = 8;
  auto wrong = Transformer::Load(dir, Head::kLanguageModel, other);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(std::string(wrong.status().message()).find("rank-4 adapters; rank 8"), std::string::npos) << wrong.status();

  // PEFT reads our files (q, k and v each with the shared A) to the same logits.
  const at::Tensor ids = Ids();
  std::vector<int64_t> flat(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
  Json rows = Json::array();
  for (int64_t r = 0; r < ids.size(0); ++r) {
    Json row = Json::array();
    for (int64_t c = 0; c < ids.size(1); ++c) row.push_back(Json(flat[r * ids.size(1) + c]));
    rows.push_back(row);
  }
  ASSERT_TRUE(WriteFileAtomically(dir + "/ids.json", DumpJson(rows)).ok());
  ASSERT_EQ(RunFixtureScript("peft_logits", dir), 0) << "see " << dir << ".peft_logits.log";
  auto bytes = ReadFileToString(dir + "/peft_logits.f32");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  at::Tensor theirs = at::empty(adapted.sizes(), at::kFloat);
  ASSERT_EQ(static_cast<size_t>(theirs.nbytes()), bytes->size());
  std::memcpy(theirs.data_ptr(), bytes->data(), bytes->size());
  EXPECT_LE((theirs - adapted).abs().max().item<double>(), 1e-4);
}

TEST(LoraTest, CriticWithAdaptersRoundTrips) {
  auto critic = Tiny(Head::kValue, kRank);
  ASSERT_TRUE(critic);
  PerturbAdapters(*critic);
  c10::AutoGradMode no_grad(false);
  const at::Tensor v = critic->Values(critic->Hidden(Ids()));
  const std::string dir = NewDir("critic");
  ASSERT_TRUE(critic->Save(dir).ok());
  ModelOptions with;
  with.lora_rank = kRank;
  auto back = Transformer::Load(dir, Head::kValue, with);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(at::equal((*back)->Values((*back)->Hidden(Ids())), v));
  auto merged = Transformer::Load(dir, Head::kValue, {});
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_LE(((*merged)->Values((*merged)->Hidden(Ids())) - v).abs().max().item<double>(), 1e-5);
}

}  // namespace
}  // namespace kernelrl::learner
