// The decoder against Hugging Face transformers on tiny random checkpoints
// generated at test time: logits, cached greedy decoding, save -> HF load,
// chunked log-probs and their gradients, activation checkpointing, critic.
#include "learner/model.h"

#include <c10/core/GradMode.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "common/json.h"
#include "learner/model_test_util.h"
#include "learner/safetensors.h"
#include "learner/test_util.h"

namespace kernelrl::learner {
namespace {

using testing::RunFixtureScript;
using testing::TempDir;

// KERNELRL_TEST_DEVICE=cuda runs the parity tests on the GPU (fp32), as
// tools/device_learner.sh does; CI runs them on the CPU.
ModelOptions TestOptions() {
  ModelOptions o;
  const char* d = std::getenv("KERNELRL_TEST_DEVICE");
  if (d != nullptr && std::string(d) == "cuda") o.device = at::Device(at::kCUDA, 0);
  return o;
}

const std::string& FixtureDir() {
  static const std::string dir = [] {
    std::string d = TempDir() + "/model_fixtures";
    int rc = RunFixtureScript("model", d);
    EXPECT_EQ(rc, 0) << "fixture generator failed; see " << d << ".model.log";
    return d;
  }();
  return dir;
}

Json Fixture(const std::string& name) {
  auto text = ReadFileToString(FixtureDir() + "/fixtures.json");
  EXPECT_TRUE(text.ok()) << text.status();
  auto j = ParseJson(*text);
  EXPECT_TRUE(j.ok()) << j.status();
  return *FindJson(*j, name);
}

at::Tensor IdsTensor(const Json& rows) {
  std::vector<int64_t> flat;
  for (const Json& r : rows) {
    for (const Json& v : r) flat.push_back(*JsonInt(v));
  }
  int64_t b = rows.size();
  return at::tensor(flat, at::kLong).view({b, -1});
}

at::Tensor ReadF32(const std::string& path, at::IntArrayRef shape) {
  auto bytes = ReadFileToString(path);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  at::Tensor t = at::empty(shape, at::kFloat);
  EXPECT_EQ(static_cast<size_t>(t.nbytes()), bytes->size());
  std::memcpy(t.data_ptr(), bytes->data(), std::min(bytes->size(), static_cast<size_t>(t.nbytes())));
  return t;
}

std::vector<int64_t> Greedy(const Transformer& m, const std::vector<int64_t>& prompt, int n) {
  c10::AutoGradMode no_grad(false);
  const at::Device dev = m.options().device;
  KVCache cache(m.config(), 2, static_cast<int64_t>(prompt.size()) + n + 1,
                at::TensorOptions().dtype(at::kFloat).device(dev));
  at::Tensor slots = at::tensor(std::vector<int64_t>{1}, at::kLong).to(dev);  // Row 1: rows are independent.
  at::Tensor ids = at::tensor(prompt, at::kLong).view({1, -1}).to(dev);
  at::Tensor h = m.Prefill(ids, slots, &cache);
  at::Tensor logits = m.HeadLogits(h.select(1, h.size(1) - 1));
  std::vector<int64_t> out;
  int64_t pos = static_cast<int64_t>(prompt.size());
  for (int i = 0; i < n; ++i) {
    int64_t next = logits.argmax(-1).item<int64_t>();
    out.push_back(next);
    logits = m.Decode({next}, {1}, {pos}, &cache);
    ++pos;
  }
  return out;
}

class ModelParityTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelParityTest, LogitsMatchTransformers) {
  const std::string name = GetParam();
  Json fx = Fixture(name);
  auto m = Transformer::Load(FixtureDir() + "/" + name, Head::kLanguageModel, TestOptions());
  ASSERT_TRUE(m.ok()) << m.status();
  at::Tensor ids = IdsTensor(*FindJson(fx, "ids")).to(TestOptions().device);
  std::vector<int64_t> shape;
  for (const Json& d : *FindJson(fx, "logits_shape")) shape.push_back(*JsonInt(d));
  at::Tensor want = ReadF32(FixtureDir() + "/" + name + "/logits.f32", shape);
  c10::AutoGradMode no_grad(false);
  at::Tensor got = (*m)->Logits(ids).cpu();
  double diff = (got - want).abs().max().item<double>();
  EXPECT_LE(diff, 1e-4) << name << " max |logits - HF| = " << diff;
  EXPECT_GT(want.std().item<double>(), 0.1) << "fixture logits are degenerate";
}

TEST_P(ModelParityTest, CachedGreedyDecodingMatchesTransformersGenerate) {
  const std::string name = GetParam();
  Json fx = Fixture(name);
  auto m = Transformer::Load(FixtureDir() + "/" + name, Head::kLanguageModel, TestOptions());
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<int64_t> prompt, want;
  for (const Json& v : *FindJson(fx, "prompt")) prompt.push_back(*JsonInt(v));
  for (const Json& v : *FindJson(fx, "greedy")) want.push_back(*JsonInt(v));
  ASSERT_EQ(want.size(), 64u);
  EXPECT_EQ(Greedy(**m, prompt, 64), want);
}

TEST_P(ModelParityTest, SavedCheckpointLoadsInTransformers) {
  const std::string name = GetParam();
  Json fx = Fixture(name);
  auto m = Transformer::Load(FixtureDir() + "/" + name, Head::kLanguageModel, {});
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string out = TempDir() + "/resaved_" + name;
  ::mkdir(out.c_str(), 0755);
  ASSERT_TRUE((*m)->Save(out).ok());
  // Reload ourselves: identical weights.
  auto again = Transformer::Load(out, Head::kLanguageModel, {});
  ASSERT_TRUE(again.ok()) << again.status();
  auto a = (*m)->HFTensors(), b = (*again)->HFTensors();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(at::equal(a[i].second, b[i].second)) << a[i].first;
  }
  // And transformers loads what we wrote and computes the same logits.
  const Json* ids = FindJson(fx, "ids");
  ASSERT_TRUE(WriteFileAtomically(out + "/ids.json", DumpJson(*ids)).ok());
  ASSERT_EQ(RunFixtureScript("hf_logits", out), 0) << "see " << out << ".hf_logits.log";
  c10::AutoGradMode no_grad(false);
  at::Tensor ours = (*m)->Logits(IdsTensor(*ids));
  at::Tensor theirs = ReadF32(out + "/hf_logits.f32", ours.sizes());
  EXPECT_LE((ours - theirs).abs().max().item<double>(), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Families, ModelParityTest, ::testing::Values("qwen2", "llama", "qwen2_yarn"));

// Qwen2.5's 128K configs state YaRN in the transformers 4.x spelling.
TEST(ModelConfigTest, Qwen25YarnConfigLoads) {
  auto j = ParseJson(R"({"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584,
      "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
      "max_position_embeddings": 32768, "rope_theta": 1000000.0,
      "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}})");
  ASSERT_TRUE(j.ok()) << j.status();
  auto c = ModelConfig::FromJson(*j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, "yarn");
  EXPECT_EQ(c->rope_scaling.factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 32768);
  EXPECT_EQ(c->rope_scaling.beta_fast, 32.0);
  // And it writes back in a form it reads again the same way.
  auto again = ModelConfig::FromJson(c->ToJson());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->rope_scaling.type, "yarn");
  EXPECT_EQ(again->rope_scaling.factor, 4.0);
  EXPECT_EQ(again->rope_scaling.original_max_position_embeddings, 32768);
  // Still refused: scalings the model does not compute.
  auto dynamic = ParseJson(R"({"model_type": "qwen2", "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8,
      "num_hidden_layers": 1, "num_attention_heads": 2, "rope_scaling": {"type": "dynamic", "factor": 2.0}})");
  ASSERT_TRUE(dynamic.ok());
  EXPECT_FALSE(ModelConfig::FromJson(*dynamic).ok());
}

ModelConfig TinyConfig() {
  return testing::TinyQwen2Config(97);
}

std::unique_ptr<Transformer> TrainableTiny(uint64_t seed) {
  ModelOptions opt;
  opt.trainable = true;
  auto m = Transformer::Create(TinyConfig(), Head::kLanguageModel, opt, seed);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// Each parameter's gradient, taken out (the model's are zeroed for the reference pass).
std::vector<at::Tensor> TakeGrads(Transformer& m) {
  std::vector<at::Tensor> g;
  for (auto& p : m.parameters()) {
    g.push_back(p.grad().clone());
    p.mutable_grad().zero_();
  }
  return g;
}

// The gradients `taken` against the model's current ones, relative to their size; returns the largest.
double ExpectGradsMatch(const std::vector<at::Tensor>& taken, Transformer& m) {
  auto ps = m.parameters();
  double largest = 0;
  for (size_t i = 0; i < ps.size(); ++i) {
    const double size = ps[i].grad().abs().max().item<double>();
    largest = std::max(largest, size);
    EXPECT_LE((taken[i] - ps[i].grad()).abs().max().item<double>(), 1e-5 * (1.0 + size)) << "parameter " << i;
  }
  return largest;
}

TEST(ModelTest, ChunkedTokenLogprobsMatchFullSoftmaxAndGradients) {
  auto m = TrainableTiny(3);
  ASSERT_NE(m, nullptr);
  at::manual_seed(11);
  at::Tensor ids = at::randint(0, 97, {2, 9}, at::kLong);
  at::Tensor targets = at::randint(0, 97, {2, 9}, at::kLong);
  targets.index_put_({0, 3}, -1);  // Ignored position.
  const double temp = 0.7;

  at::Tensor h = m->Hidden(ids);
  at::Tensor lp = m->TokenLogprobs(h, targets, temp);
  at::Tensor loss = -(lp * at::arange(18, at::kFloat).view({2, 9})).sum();
  loss.backward();
  const std::vector<at::Tensor> g1 = TakeGrads(*m);
  at::Tensor logits = m->Logits(ids) / temp;
  at::Tensor ref = at::log_softmax(logits, -1).gather(-1, targets.clamp_min(0).unsqueeze(-1)).squeeze(-1);
  ref = ref.masked_fill(targets.lt(0), 0.0);
  (-(ref * at::arange(18, at::kFloat).view({2, 9})).sum()).backward();
  EXPECT_LE((lp - ref).abs().max().item<double>(), 1e-5);
  EXPECT_EQ(lp.index({0, 3}).item<float>(), 0.0f);
  ExpectGradsMatch(g1, *m);
}

// The entropy bonus's chunked entropy: the value and its gradients match autograd through the full softmax.
TEST(ModelTest, ChunkedTokenEntropyMatchesFullSoftmaxAndGradients) {
  auto m = TrainableTiny(4);
  ASSERT_NE(m, nullptr);
  at::manual_seed(13);
  at::Tensor ids = at::randint(0, 97, {2, 9}, at::kLong);
  const double temp = 0.8;
  const at::Tensor w = at::rand({2, 9}, at::kFloat) + 0.5;

  at::Tensor h = m->Hidden(ids);
  at::Tensor ent = m->TokenEntropy(h, temp, /*with_grad=*/true);
  (ent * w).sum().backward();
  const std::vector<at::Tensor> g1 = TakeGrads(*m);
  at::Tensor logp = at::log_softmax(m->Logits(ids) / temp, -1);
  at::Tensor ref = -(logp.exp() * logp).sum(-1);
  (ref * w).sum().backward();
  EXPECT_LE((ent - ref).abs().max().item<double>(), 1e-5);
  EXPECT_GT(ref.min().item<double>(), 0.1);  // A random head: far from one-hot, the gradient is not ~0.
  const at::Tensor no_grad = m->TokenEntropy(h, temp);
  EXPECT_FALSE(no_grad.requires_grad());
  EXPECT_LE((no_grad - ref).abs().max().item<double>(), 1e-5);
  EXPECT_GT(ExpectGradsMatch(g1, *m), 1e-4);
}

TEST(ModelTest, ActivationCheckpointingGivesTheSameGradients) {
  auto m = TrainableTiny(5);
  ASSERT_NE(m, nullptr);
  at::manual_seed(12);
  at::Tensor ids = at::randint(0, 97, {2, 12}, at::kLong);
  auto grads = [&](bool ckpt) {
    m->set_activation_checkpointing(ckpt);
    return testing::NextTokenGradients(*m, ids);
  };
  auto plain = grads(false);
  auto ckpt = grads(true);
  ASSERT_EQ(plain.size(), ckpt.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_GT(plain[i].abs().sum().item<double>(), 0.0) << "parameter " << i << " got no gradient";
    EXPECT_LE((plain[i] - ckpt[i]).abs().max().item<double>(), 1e-6) << "parameter " << i;
  }
}

// ModelOptions::offload_activations: on CUDA (KERNELRL_TEST_DEVICE=cuda) the
// checkpointed block inputs go to pinned host memory and come back for
// backward; the gradients are bit-identical. On the CPU it is a no-op.
TEST(ModelTest, OffloadedBlockInputsGiveTheSameGradients) {
  ModelOptions o = TestOptions();
  o.trainable = true;
  o.activation_checkpointing = true;
  auto m = Transformer::Create(TinyConfig(), Head::kLanguageModel, o, 5);
  ASSERT_TRUE(m.ok()) << m.status();
  at::manual_seed(12);
  const at::Tensor ids = at::randint(0, 97, {2, 12}, at::kLong).to(o.device);
  auto grads = [&](bool offload) {
    (*m)->set_offload_activations(offload);
    return testing::NextTokenGradients(**m, ids);
  };
  const auto kept = grads(false), offloaded = grads(true);
  ASSERT_EQ(kept.size(), offloaded.size());
  for (size_t i = 0; i < kept.size(); ++i) {
    EXPECT_GT(kept[i].abs().sum().item<double>(), 0.0) << "parameter " << i;
    EXPECT_TRUE(at::equal(kept[i], offloaded[i])) << "parameter " << i;
  }
  if (!o.device.is_cuda()) std::printf("offload_activations: a no-op on the CPU; the GPU run checks the copies\n");
}

TEST(ModelTest, CriticHasValueHeadAndRoundTrips) {
  auto critic = Transformer::Create(TinyConfig(), Head::kValue, {}, 9);
  ASSERT_TRUE(critic.ok());
  at::Tensor ids = at::randint(0, 97, {3, 5}, at::kLong);
  c10::AutoGradMode no_grad(false);
  at::Tensor v = (*critic)->Values((*critic)->Hidden(ids));
  EXPECT_EQ(v.sizes(), (std::vector<int64_t>{3, 5}));
  const std::string dir = TempDir() + "/critic";
  ::mkdir(dir.c_str(), 0755);
  ASSERT_TRUE((*critic)->Save(dir).ok());
  auto back = Transformer::Load(dir, Head::kValue, {});
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(at::equal((*back)->Values((*back)->Hidden(ids)), v));
  // A critic checkpoint is not a language model: loading it as one names the missing tensor.
  auto wrong = Transformer::Load(dir, Head::kLanguageModel, {});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(std::string(wrong.status().message()).find("lm_head.weight"), std::string::npos) << wrong.status();
}

// draw_on_device: on the CPU it changes nothing; on CUDA (KERNELRL_TEST_DEVICE=cuda)
// the device's generator draws, seeded: same seed same weights, another seed
// other weights, N(0, 0.02) either way.
TEST(ModelTest, DrawOnDeviceIsSeededAndLeavesCpuDrawsAlone) {
  ModelOptions o = TestOptions();
  o.draw_on_device = true;
  auto a = Transformer::Create(TinyConfig(), Head::kLanguageModel, o, 5);
  auto b = Transformer::Create(TinyConfig(), Head::kLanguageModel, o, 5);
  auto c = Transformer::Create(TinyConfig(), Head::kLanguageModel, o, 6);
  ModelOptions plain = TestOptions();
  auto cpu_draw = Transformer::Create(TinyConfig(), Head::kLanguageModel, plain, 5);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && cpu_draw.ok());
  const at::Tensor wa = (*a)->layers()[0].qkv_w, wb = (*b)->layers()[0].qkv_w, wc = (*c)->layers()[0].qkv_w;
  EXPECT_EQ(wa.device(), o.device);
  EXPECT_TRUE(at::equal(wa, wb));
  EXPECT_FALSE(at::equal(wa, wc));
  EXPECT_NEAR(wa.to(at::kFloat).std().item<double>(), 0.02, 0.004);
  EXPECT_EQ(at::equal(wa, (*cpu_draw)->layers()[0].qkv_w), !o.device.is_cuda());
}

// AllowCudnnAttention: making a model on CUDA (KERNELRL_TEST_DEVICE=cuda) turns cuDNN's attention
// off for the process unless it was allowed; a CPU model leaves torch's choice as it was.
TEST(ModelTest, CudnnAttentionOffForCudaModelsUnlessAllowed) {
  const ModelOptions o = TestOptions();
  at::globalContext().setSDPUseCuDNN(true);  // torch's default
  ASSERT_TRUE(Transformer::Create(TinyConfig(), Head::kLanguageModel, o, 1).ok());
  EXPECT_EQ(at::globalContext().userEnabledCuDNNSDP(), !o.device.is_cuda());
  AllowCudnnAttention(true);
  EXPECT_TRUE(at::globalContext().userEnabledCuDNNSDP());
  ASSERT_TRUE(Transformer::Create(TinyConfig(), Head::kLanguageModel, o, 2).ok());
  EXPECT_TRUE(at::globalContext().userEnabledCuDNNSDP()) << "an allowed choice stands when a model is made";
  AllowCudnnAttention(false);
  EXPECT_FALSE(at::globalContext().userEnabledCuDNNSDP());
  if (!o.device.is_cuda()) std::printf("cuDNN attention: the CPU case; the GPU run checks a CUDA model's choice\n");
}

TEST(ModelTest, MisshapenCheckpointIsRejectedWithTheTensorName) {
  auto m = Transformer::Create(TinyConfig(), Head::kLanguageModel, {}, 1);
  ASSERT_TRUE(m.ok());
  const std::string dir = TempDir() + "/misshapen";
  ::mkdir(dir.c_str(), 0755);
  ASSERT_TRUE((*m)->Save(dir).ok());
  auto cfg = ReadFileToString(dir + "/config.json");
  auto j = ParseJson(*cfg);
  (*j)["intermediate_size"] = Json(65);
  ASSERT_TRUE(WriteFileAtomically(dir + "/config.json", DumpJson(*j)).ok());
  auto bad = Transformer::Load(dir, Head::kLanguageModel, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("mlp.gate_proj.weight"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace kernelrl::learner
