// The family's split and templates: held-out tasks differ from every training
// task by composition or shape; every source parses back to its spec; every
// choice renders for both devices with the choice's settings; the CPU
// templates compile (g++, as the sandbox's CPU backend builds them) and the CUDA
// templates compile for sm_90 (nvcc, when installed).
#include <cstdlib>
#include <fstream>
#include <algorithm>
#include <iterator>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/family/family.h"
#include "gtest/gtest.h"

namespace kernelrl::data::family {
namespace {

using agent::family::AllChoices;
using agent::family::Choice;
using agent::family::ChoiceDigits;
using agent::family::DescribeChoice;
using agent::family::kNumSlots;
using agent::family::ParseTaskSpec;
using agent::family::Render;
using agent::family::Slot;
using agent::family::Slots;

std::string Key(const FamilyTask& t) { return absl::StrCat(t.spec.family, ":", absl::StrJoin(t.spec.ops, ",")); }

TEST(FamilyTasks, HeldOutDiffersFromTrainingByCompositionOrShape) {
  for (const char* device : {"cuda", "cpu"}) {
    const std::vector<FamilyTask> tasks = MakeTasks(device);
    std::set<std::string> train_comp, train_shape, ids, train_ops;
    int heldout = 0;
    for (const FamilyTask& t : tasks) {
      EXPECT_TRUE(ids.insert(t.id).second) << "duplicate id " << t.id;
      if (t.held_out) continue;
      train_comp.insert(Key(t));
      train_shape.insert(absl::StrCat(t.spec.family, ":", absl::StrJoin(t.shape, "x")));
      for (const std::string& op : t.spec.ops) train_ops.insert(op);
    }
    for (const FamilyTask& t : tasks) {
      if (!t.held_out) continue;
      ++heldout;
      const bool new_comp = !train_comp.count(Key(t));
      const bool new_shape = !train_shape.count(absl::StrCat(t.spec.family, ":", absl::StrJoin(t.shape, "x")));
      EXPECT_TRUE(t.split_reason == "composition" ? new_comp && !new_shape : new_shape && !new_comp) << t.id;
      for (const std::string& op : t.spec.ops) EXPECT_TRUE(train_ops.count(op)) << t.id << ": op never trained: " << op;
    }
    EXPECT_GE(heldout, 12) << device;
    EXPECT_GE(tasks.size() - heldout, 45u) << device;
  }
}

TEST(FamilyTasks, SourcesParseBackAndAreKernelBenchShaped) {
  for (const FamilyTask& t : MakeTasks("cuda")) {
    auto spec = ParseTaskSpec(t.source);
    ASSERT_TRUE(spec.ok()) << t.id << ": " << spec.status();
    EXPECT_EQ(spec->family, t.spec.family);
    EXPECT_EQ(spec->ops, t.spec.ops);
    for (const char* needle : {"class Model(nn.Module)", "def get_inputs()", "def get_init_inputs()"}) {
      EXPECT_TRUE(absl::StrContains(t.source, needle)) << t.id;
    }
    EXPECT_TRUE(absl::StrContains(t.source, absl::StrCat("torch.randn(", t.shape[0], ", ", t.shape[1], ")"))) << t.id;
  }
  EXPECT_TRUE(absl::IsNotFound(ParseTaskSpec("import torch\n").status()));
  EXPECT_FALSE(ParseTaskSpec("# kernelrl-family: rowreduce ops=cumsum\n").ok());
  EXPECT_FALSE(ParseTaskSpec("# kernelrl-family: conv ops=relu\n").ok());
}

TEST(FamilyTasks, ReadingTasksAreNewCompositionsThatHoldNoHeldOutOne) {
  for (const char* device : {"cuda", "cpu"}) {
    std::set<std::string> known, train_shapes;
    std::vector<std::vector<std::string>> heldout_ops;
    for (const FamilyTask& t : MakeTasks(device)) {
      known.insert(Key(t));
      if (t.split_reason == "composition") heldout_ops.push_back(t.spec.ops);
      if (!t.held_out) train_shapes.insert(absl::StrCat(t.spec.family, ":", absl::StrJoin(t.shape, "x")));
    }
    const std::vector<FamilyTask> reading = MakeReadingTasks(device, 20, 7);
    ASSERT_EQ(reading.size(), 60u) << device;
    std::set<std::string> seen;
    std::map<std::string, int> per_family;
    for (const FamilyTask& t : reading) {
      ++per_family[t.spec.family];
      EXPECT_TRUE(seen.insert(Key(t)).second) << "composition twice: " << t.id;
      EXPECT_FALSE(known.count(Key(t))) << t.id << " is a training or held-out composition";
      for (const auto& h : heldout_ops) {
        EXPECT_EQ(std::search(t.spec.ops.begin(), t.spec.ops.end(), h.begin(), h.end()), t.spec.ops.end())
            << t.id << " holds a held-out composition";
      }
      for (size_t i = 1; i < t.spec.ops.size(); ++i) EXPECT_NE(t.spec.ops[i], t.spec.ops[i - 1]) << t.id;
      EXPECT_TRUE(train_shapes.count(absl::StrCat(t.spec.family, ":", absl::StrJoin(t.shape, "x")))) << t.id;
      EXPECT_FALSE(t.held_out);
      EXPECT_EQ(t.split_reason, "reading");
      EXPECT_TRUE(absl::StartsWith(t.id, "reading/")) << t.id;
      auto spec = ParseTaskSpec(t.source);
      ASSERT_TRUE(spec.ok()) << t.id << ": " << spec.status();
      EXPECT_EQ(spec->ops, t.spec.ops);
    }
    for (const char* f : {"elementwise", "rowreduce", "gemm_epilogue"}) EXPECT_EQ(per_family[f], 20) << f;
    // A seed gives one set, another seed another.
    std::vector<std::string> a, b, c;
    for (const FamilyTask& t : MakeReadingTasks(device, 20, 7)) a.push_back(t.id);
    for (const FamilyTask& t : reading) b.push_back(t.id);
    for (const FamilyTask& t : MakeReadingTasks(device, 20, 8)) c.push_back(t.id);
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
  }
}

TEST(FamilyTasks, ProbeIsAFamilyTaskAtAnySize) {
  auto probe = MakeProbe("ge_relu_2048x256x4096");
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_EQ(probe->id, "probe/ge_relu_2048x256x4096");
  EXPECT_EQ(probe->spec.family, "gemm_epilogue");
  EXPECT_EQ(probe->shape, (std::vector<int64_t>{2048, 256, 4096}));
  EXPECT_TRUE(absl::StrContains(probe->source, "torch.randn(2048, 256)")) << probe->source;
  EXPECT_TRUE(absl::StrContains(probe->source, "return [256, 4096]")) << probe->source;
  auto spec = ParseTaskSpec(probe->source);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ops, std::vector<std::string>{"relu"});
  auto rows = MakeProbe("rr_softmax-scale_96x4000");
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->spec.ops, (std::vector<std::string>{"softmax", "scale"}));
  for (const char* bad : {"ge_relu_2048x256", "rr_relu_64x64", "ew_cumsum_64x64", "xx_relu_64x64", "ew_relu_64x0",
                          "ew_relu", "ew_relu_64xa"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(MakeProbe(bad).status())) << bad;
  }
}

TEST(FamilyTemplates, EveryChoiceRendersItsSettings) {
  for (const FamilyTask& t : MakeTasks("cuda")) {
    if (t.shape != MakeTasks("cuda").front().shape && t.spec.family == "elementwise") continue;  // One shape suffices.
    auto slots = Slots(t.spec.family);
    ASSERT_TRUE(slots.ok());
    ASSERT_EQ(slots->size(), static_cast<size_t>(kNumSlots));
    for (const Choice& c : AllChoices(*slots)) {
      for (const char* device : {"cuda", "cpu"}) {
        auto files = Render(t.spec, c, device);
        ASSERT_TRUE(files.ok()) << files.status();
        ASSERT_EQ(files->size(), 2u);
        const std::string& model_new = files->at("model_new.py");
        std::string kernel;
        for (const auto& [path, content] : *files) {
          if (path != "model_new.py") {
            EXPECT_TRUE(absl::EndsWith(path, std::string(device) == "cpu" ? ".cc" : ".cu")) << path;
            kernel = content;
          }
        }
        // The launcher model_new.py calls is the one the kernel defines.
        const std::string fn = t.spec.family == "elementwise" ? "elementwise_chain"
                               : t.spec.family == "rowreduce" ? "row_op"
                                                              : "gemm_epilogue";
        EXPECT_TRUE(absl::StrContains(model_new, "lib." + fn + "(")) << t.id;
        EXPECT_TRUE(absl::StrContains(kernel, "extern \"C\" int " + fn + "(")) << t.id;
        EXPECT_TRUE(absl::StrContains(kernel, DescribeChoice(*slots, c))) << t.id;
        const bool half = c[3] == 1;
        const std::string half_define = t.spec.family == "elementwise" ? "" : t.spec.family == "rowreduce" ? "#define HALF_ACC " : "#define HALF ";
        if (!half_define.empty()) {
          EXPECT_TRUE(absl::StrContains(kernel, half_define + (half ? "1" : "0"))) << t.id;
        }
        if (t.spec.family == "elementwise") {
          EXPECT_EQ(absl::StrContains(kernel, "v = to_half(v);"), half);
        }
        for (size_t i = t.spec.family == "rowreduce" ? 1 : 0; i < t.spec.ops.size(); ++i) {
          EXPECT_TRUE(absl::StrContains(kernel, absl::StrCat("// ", t.spec.ops[i], "\n"))) << t.id;
        }
      }
    }
  }
  Choice bad{};
  bad[0] = 7;
  EXPECT_FALSE(Render({"elementwise", {"relu"}}, bad, "cuda").ok());
  EXPECT_FALSE(Render({"elementwise", {"relu"}}, Choice{}, "tpu").ok());
}

// One choice per option of the widest slot, so every option of every slot is built.
std::vector<Choice> Covering(const std::vector<Slot>& slots) {
  std::vector<Choice> out;
  for (int k = 0; k < 3; ++k) {
    Choice c{};
    for (int i = 0; i < kNumSlots; ++i) c[i] = (k + i) % static_cast<int>(slots[i].options.size());
    out.push_back(c);
  }
  return out;
}

std::string Tmp() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

constexpr char kNvcc[] = "/usr/local/cuda/bin/nvcc";
constexpr char kNoNvcc[] = "no nvcc at /usr/local/cuda/bin/nvcc: the CUDA templates are compiled on the GPU machine only";
bool HaveNvcc() { return std::system(absl::StrCat(kNvcc, " --version > /dev/null 2>&1").c_str()) == 0; }

// Every family with choices covering each option; each other row reduction with
// one choice (`all_reductions`) or not at all.
void CompileCovering(const std::string& device, const std::string& compiler, bool all_reductions) {
  std::set<std::string> reductions_done, families_done;
  for (const FamilyTask& t : MakeTasks(device)) {
    if (t.held_out) continue;
    // Each family once, each row reduction once.
    const std::string key = t.spec.family == "rowreduce" ? t.spec.ops[0] : t.spec.family;
    if (!reductions_done.insert(key).second) continue;
    std::vector<Choice> choices = Covering(*Slots(t.spec.family));
    if (!families_done.insert(t.spec.family).second) {
      if (!all_reductions) continue;
      choices.resize(1);
    }
    for (const Choice& c : choices) {
      auto files = Render(t.spec, c, device);
      ASSERT_TRUE(files.ok());
      for (const auto& [path, content] : *files) {
        if (path == "model_new.py") continue;
        const std::string src = absl::StrCat(Tmp(), "/k_", key, "_", ChoiceDigits(c), device == "cpu" ? ".cc" : ".cu");
        std::ofstream(src) << content;
        const std::string cmd = absl::StrCat(compiler, " ", src, " -o ", src, ".o > ", src, ".log 2>&1");
        EXPECT_EQ(std::system(cmd.c_str()), 0) << t.id << " choice " << ChoiceDigits(c) << ": see " << src << ".log\n"
                                               << content;
      }
    }
  }
}

TEST(FamilyTemplates, CpuTemplatesCompile) {
  CompileCovering("cpu", "g++ -O3 -std=c++17 -fPIC -fno-openmp -Wall -Werror -Wno-unused-function -c",
                  /*all_reductions=*/true);
}

TEST(FamilyTemplates, CudaTemplatesCompileForSm90) {
  if (!HaveNvcc()) GTEST_SKIP() << kNoNvcc;
  CompileCovering("cuda", absl::StrCat(kNvcc, " -O3 --use_fast_math -arch=sm_90 -std=c++17 -c"), /*all_reductions=*/false);
}

// The CUDA GEMM template decides on the host, from its own act(), whether cuBLASLt's
// epilogue applies the chain: for every GEMM composition it must agree with the rule the
// corpus models (CublasLtAppliesChain). A host program around the fused cuBLAS rendering.
TEST(FamilyTemplates, CudaGemmFindsALoneReluFromItsOwnAct) {
  if (!HaveNvcc()) GTEST_SKIP() << kNoNvcc;
  std::set<std::string> done;
  int relu = 0;
  for (const FamilyTask& t : MakeTasks("cuda")) {
    if (t.spec.family != "gemm_epilogue" || !done.insert(Key(t)).second) continue;
    auto files = Render(t.spec, Choice{0, 1, 0, 0}, "cuda");
    ASSERT_TRUE(files.ok()) << files.status();
    const std::string dir = absl::StrCat(Tmp(), "/relu_check_", absl::StrJoin(t.spec.ops, "-"));
    const std::string kernel = dir + ".kernel.cu", main = dir + ".main.cu";
    std::ofstream(kernel) << files->at("kernels/gemm_epilogue.cu");
    std::ofstream(main) << "#include \"" << kernel << "\"\n#include <cstdio>\n"
                        << "int main() { std::printf(\"%d\", act_is_relu() ? 1 : 0); return 0; }\n";
    const std::string cmd = absl::StrCat(kNvcc, " -std=c++17 -arch=sm_90 ", main, " -o ", dir, ".bin -lcublasLt -lcublas > ",
                                         dir, ".log 2>&1 && ", dir, ".bin > ", dir, ".out");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << t.id << ": see " << dir << ".log";
    std::ifstream out(dir + ".out");
    std::string got((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
    const bool want = agent::family::CublasLtAppliesChain(t.spec);
    relu += want;
    EXPECT_EQ(got, want ? "1" : "0") << t.id;
  }
  EXPECT_GE(done.size(), 7u);
  EXPECT_EQ(relu, 1);
}

}  // namespace
}  // namespace kernelrl::data::family
