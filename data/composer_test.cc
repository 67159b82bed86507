#include "data/composer.h"

#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace kernelrl {
namespace {

using ::kernelrl::v1::OpRules;

OpCatalogue AllRules() {
  std::ifstream in("data/ops.textproto");
  std::stringstream text;
  text << in.rdbuf();
  OpRules rules;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text.str(), &rules));
  OpCatalogue cat;
  for (const auto& op : rules.op()) *cat.add_ops() = op;
  return cat;
}

SamplerConfig Sampler() {
  SamplerConfig s;
  for (double w : {1.0, 4.0, 2.0, 1.0, 1.0}) s.add_op_count_weights(w);
  s.set_min_target_ms(2);
  s.set_max_target_ms(20);
  s.set_max_tensor_bytes(1LL << 30);
  return s;
}

TargetDevice H100() {
  TargetDevice t;
  t.set_device("cuda");
  t.set_bandwidth_gbps(2500);
  t.set_gflops(40000);
  t.set_launch_us(5);
  return t;
}

TEST(ComposerTest, EveryRuleInTheFileIsKnown) {
  const OpCatalogue cat = AllRules();
  ASSERT_GT(cat.ops_size(), 80);
  std::set<std::string> names;
  for (const auto& op : cat.ops()) {
    EXPECT_TRUE(IsKnownRule(op.rule())) << op.name() << " " << op.rule();
    EXPECT_TRUE(names.insert(op.name()).second) << "duplicate " << op.name();
    Rng rng(1, 2);
    EXPECT_TRUE(FillTemplate(op.args(), &rng).ok()) << op.name();
  }
}

TEST(ComposerTest, SameSeedSameCandidatesOtherSeedOthers) {
  const uint64_t seed = std::random_device()();
  Composer a(AllRules(), Sampler(), H100(), seed, "t");
  Composer b(AllRules(), Sampler(), H100(), seed, "t");
  Composer c(AllRules(), Sampler(), H100(), seed + 1, "t");
  int differ = 0;
  for (int i = 0; i < 40; ++i) {
    auto x = a.Compose(i), y = b.Compose(i), z = c.Compose(i);
    ASSERT_TRUE(x.ok()) << x.status();
    ASSERT_TRUE(y.ok() && z.ok());
    EXPECT_EQ(x->source, y->source);
    EXPECT_EQ(x->id, y->id);
    differ += x->source != z->source;
  }
  EXPECT_GT(differ, 30);
}

TEST(ComposerTest, TasksAreKernelBenchShapedAndSizedForTheTarget) {
  const uint64_t seed = std::random_device()();
  Composer composer(AllRules(), Sampler(), H100(), seed, "synth_");
  std::map<int, int> counts;
  int in_range = 0, n = 400;
  for (int i = 0; i < n; ++i) {
    auto t = composer.Compose(i);
    ASSERT_TRUE(t.ok()) << t.status();
    counts[t->operators.size()]++;
    EXPECT_THAT(t->source, ::testing::HasSubstr("class Model(nn.Module):"));
    EXPECT_THAT(t->source, ::testing::HasSubstr("def get_inputs():"));
    EXPECT_THAT(t->source, ::testing::HasSubstr("def get_init_inputs():"));
    EXPECT_EQ(t->id.rfind("synth_", 0), 0u);
    // The drawn target is 2..20 ms; rounding the batch down may halve it.
    in_range += t->estimated_ms >= 0.9 && t->estimated_ms <= 20.01;
    ASSERT_GE(t->input_shape.size(), 2u);
    EXPECT_LE(4.0 * NumElements(t->input_shape), double(1LL << 30)) << t->source;
  }
  EXPECT_GT(in_range, n * 9 / 10);
  // Weights 1:4:2:1:1 -> two operators about 44%, each count present.
  for (int k = 1; k <= 5; ++k) EXPECT_GT(counts[k], 0) << k;
  EXPECT_GT(counts[2], counts[1]);
  EXPECT_GT(counts[2], counts[5]);
}

// max_task_bytes caps the probe's estimated footprint (parameters, inputs, 3x the largest
// activation) without pushing tasks out of the target window.
TEST(ComposerTest, TaskFootprintStaysUnderMaxTaskBytes) {
  const uint64_t seed = std::random_device()();
  SamplerConfig s = Sampler();
  const int64_t cap = (int64_t{3} << 30) + static_cast<int64_t>(seed % (int64_t{1} << 29));
  s.set_max_task_bytes(cap);
  Composer capped(AllRules(), s, H100(), seed, "synth_");
  Composer free(AllRules(), Sampler(), H100(), seed, "synth_");
  int n = 300, in_range = 0, above_cap_uncapped = 0;
  for (int i = 0; i < n; ++i) {
    auto t = capped.Compose(i);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_GT(t->estimated_peak_bytes, 4 * NumElements(t->input_shape)) << t->source;
    EXPECT_LE(t->estimated_peak_bytes, cap) << t->source;
    in_range += t->estimated_ms >= 0.9 && t->estimated_ms <= 20.01;
    auto u = free.Compose(i);
    ASSERT_TRUE(u.ok());
    above_cap_uncapped += u->estimated_peak_bytes > cap;
  }
  EXPECT_GT(in_range, n * 8 / 10);
  EXPECT_GT(above_cap_uncapped, 0) << "the cap never bound: the test does not exercise it";
}

// Every rule is drawn (an unset weight means 1), and chains go beyond one family.
TEST(ComposerTest, EveryOperatorGetsDrawn) {
  Composer composer(AllRules(), Sampler(), H100(), std::random_device()(), "t");
  std::set<std::string> seen;
  int too_small = 0;  // A chain whose memory cap leaves no task long enough: a rejection by design.
  for (int i = 0; i < 3000; ++i) {
    auto t = composer.Compose(i);
    if (t.status().code() == absl::StatusCode::kResourceExhausted) {
      ++too_small;
      continue;
    }
    ASSERT_TRUE(t.ok()) << t.status();
    seen.insert(t->operators.begin(), t->operators.end());
  }
  EXPECT_LT(too_small, 30) << "of 3000 compositions rejected as too small for the target time";
  std::vector<std::string> never;
  for (const auto& name : composer.OperatorNames())
    if (!seen.count(name)) never.push_back(name);
  EXPECT_LT(never.size(), 5u) << ::testing::PrintToString(never);
}

TEST(ComposerTest, ShapesFlowThroughConvPoolLinear) {
  Composer composer(AllRules(), Sampler(), H100(), 7, "t");
  Rng rng(7, 7);
  Sizing fixed;
  fixed.size_batch = false;
  auto t = composer.ComposeSequence(0, {"Conv2d", "MaxPool2d", "torch.flatten"}, &rng, fixed);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->output_shape.size(), 2u);
  EXPECT_EQ(t->input_shape[0], 1);
  EXPECT_THAT(t->source, ::testing::HasSubstr("self.conv2d_0 = nn.Conv2d("));
  EXPECT_THAT(t->source, ::testing::HasSubstr("x = torch.flatten(x, 1)"));
  // A sequence whose rules cannot chain is refused, not emitted.
  EXPECT_FALSE(composer.ComposeSequence(1, {"Linear", "Conv3d"}, &rng, fixed).ok());
  EXPECT_FALSE(composer.ComposeSequence(1, {"ReLU", "torch.matmul"}, &rng, fixed).ok());
  EXPECT_FALSE(composer.ComposeSequence(1, {"NotAnOperator"}, &rng, fixed).ok());
}

TEST(ComposerTest, TransformersModulesStandAlone) {
  OpCatalogue cat = AllRules();
  auto* m = cat.add_transformers();
  m->set_family("llama");
  m->set_module_path("transformers.models.llama.modeling_llama");
  m->set_class_name("LlamaMLP");
  m->set_config_class("transformers.models.llama.configuration_llama.LlamaConfig");
  m->set_construct("config");
  SamplerConfig s = Sampler();
  s.set_transformers_share(0.5);
  Composer composer(cat, s, H100(), 3, "t");
  int tf = 0;
  for (int i = 0; i < 100; ++i) {
    auto t = composer.Compose(i);
    ASSERT_TRUE(t.ok()) << t.status();
    if (t->transformers) {
      ++tf;
      EXPECT_EQ(t->operators.size(), 1u);
      EXPECT_THAT(t->source, ::testing::HasSubstr("self.block = LlamaMLP(config)"));
    }
  }
  EXPECT_GT(tf, 25);
  EXPECT_LT(tf, 75);
}

}  // namespace
}  // namespace kernelrl
