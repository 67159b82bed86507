// The family's ops, slots and tasks; Render() dispatches to the CUDA or CPU templates.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "data/family/family.h"

namespace kernelrl::data::family {
namespace {

constexpr char kHeader[] = "# kernelrl-family: ";

// Pointwise ops: the chains of `elementwise` and the epilogues of the other two families.
// Every expression is finite for finite fp32 input (|x| ~ 1e5 included).
constexpr PointwiseOp kOps[] = {
    {"relu", "x = torch.relu(x)", "fmaxf(v, 0.f)"},
    {"gelu", "x = F.gelu(x, approximate=\"tanh\")",
     "0.5f * v * (1.f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)))"},
    {"sigmoid", "x = torch.sigmoid(x)", "1.f / (1.f + expf(-v))"},
    {"tanh", "x = torch.tanh(x)", "tanhf(v)"},
    {"silu", "x = F.silu(x)", "v / (1.f + expf(-v))"},
    {"scale", "x = x * 0.5", "v * 0.5f"},
    {"shift", "x = x + 1.0", "v + 1.0f"},
    {"square", "x = x * x", "v * v"},
    {"abs", "x = torch.abs(x)", "fabsf(v)"},
    {"clamp", "x = torch.clamp(x, -1.0, 1.0)", "fminf(fmaxf(v, -1.f), 1.f)"},
};

// Row reductions: the Python statement of each (over dim 1 of a 2-D x).
const std::map<std::string, std::string>& Reductions() {
  static const auto* m = new std::map<std::string, std::string>{
      {"softmax", "x = torch.softmax(x, dim=1)"},
      {"log_softmax", "x = torch.log_softmax(x, dim=1)"},
      {"layernorm", "x = F.layer_norm(x, (x.shape[1],), eps=1e-5)"},
      {"rmsnorm", "x = x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + 1e-6)"},
  };
  return *m;
}

using Ops = std::vector<std::string>;
using Shape = std::vector<int64_t>;

struct FamilyTable {
  std::string family, abbr;
  std::vector<Ops> train_ops, heldout_ops;
  std::vector<Shape> gpu_train_shapes, gpu_heldout_shapes, cpu_train_shapes, cpu_heldout_shapes;
};

// Held-out compositions never occur in training (every op in them does); held-out
// shapes are sizes no training task has. Odd column counts exercise the tails of
// vectorized paths.
const std::vector<FamilyTable>& Tables() {
  static const auto* t = new std::vector<FamilyTable>{
      {"elementwise", "ew",
       {{"gelu", "sigmoid"}, {"relu", "scale"}, {"tanh", "square"}, {"silu", "shift"}, {"square", "sigmoid"},
        {"abs", "gelu"}, {"clamp", "silu", "scale"}, {"shift", "relu", "tanh"}},
       {{"sigmoid", "gelu"}, {"scale", "tanh", "abs"}, {"square", "silu"}},
       {{4096, 4096}, {16384, 1024}, {2048, 2047}},
       {{8192, 3072}, {1536, 1531}},
       {{64, 256}, {256, 64}, {32, 127}},
       {{128, 96}, {48, 45}}},
      {"rowreduce", "rr",
       {{"softmax"}, {"log_softmax"}, {"layernorm"}, {"rmsnorm"}, {"softmax", "scale"}, {"layernorm", "tanh"}},
       {{"rmsnorm", "tanh"}, {"log_softmax", "scale"}},
       {{4096, 1024}, {8192, 512}, {1024, 4096}},
       {{3072, 999}, {512, 8192}},
       {{64, 128}, {128, 64}, {32, 256}},
       {{48, 99}, {16, 512}}},
      {"gemm_epilogue", "ge",
       {{"relu"}, {"gelu"}, {"sigmoid", "scale"}, {"tanh"}, {"silu", "shift"}},
       {{"gelu", "scale"}, {"relu", "tanh"}},
       {{512, 1024, 1024}, {1024, 512, 2048}, {2048, 1024, 512}},
       {{768, 768, 3072}, {256, 2000, 1024}},
       {{32, 64, 64}, {64, 32, 128}, {128, 64, 32}},
       {{48, 48, 96}, {16, 100, 64}}},
  };
  return *t;
}

std::string Source(const TaskSpec& spec, const Shape& shape) {
  std::string init_args, init_inputs = "[]", inputs;
  std::vector<std::string> lines;
  size_t first_pointwise = 0;
  if (spec.family == "rowreduce") {
    lines.push_back(Reductions().at(spec.ops[0]));
    first_pointwise = 1;
  } else if (spec.family == "gemm_epilogue") {
    lines.push_back("x = self.fc(x)");
    init_args = ", in_features, out_features";
    init_inputs = absl::StrCat("[", shape[1], ", ", shape[2], "]");
  }
  for (size_t i = first_pointwise; i < spec.ops.size(); ++i) lines.push_back(FindOp(spec.ops[i])->torch_line);
  inputs = absl::StrCat("torch.randn(", shape[0], ", ", shape[1], ")");
  std::string forward;
  for (const std::string& l : lines) absl::StrAppend(&forward, "        ", l, "\n");
  return absl::StrCat(kHeader, spec.family, " ops=", absl::StrJoin(spec.ops, ","), "\n",
                      "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n",
                      "class Model(nn.Module):\n    \"\"\"", spec.family, ": ", absl::StrJoin(spec.ops, " -> "),
                      ".\"\"\"\n\n    def __init__(self", init_args, "):\n        super().__init__()\n",
                      spec.family == "gemm_epilogue" ? "        self.fc = nn.Linear(in_features, out_features)\n" : "",
                      "\n    def forward(self, x):\n", forward, "        return x\n\n\n",
                      "def get_inputs():\n    return [", inputs, "]\n\n\n",
                      "def get_init_inputs():\n    return ", init_inputs, "\n");
}

FamilyTask Make(const FamilyTable& t, const Ops& ops, const Shape& shape, const std::string& reason) {
  FamilyTask task;
  task.spec = {t.family, ops};
  task.shape = shape;
  task.held_out = !reason.empty();
  task.split_reason = reason;
  task.id = absl::StrCat(task.held_out ? "heldout/" : "train/", t.abbr, "_", absl::StrJoin(ops, "-"), "_",
                         absl::StrJoin(shape, "x"));
  task.source = Source(task.spec, shape);
  return task;
}

}  // namespace

const PointwiseOp* FindOp(const std::string& name) {
  for (const PointwiseOp& op : kOps) {
    if (name == op.name) return &op;
  }
  return nullptr;
}

absl::StatusOr<std::vector<Slot>> Slots(const std::string& family) {
  if (family == "elementwise") {
    return std::vector<Slot>{{"vec", {"1", "2", "4"}},
                             {"block", {"64", "256", "1024"}},
                             {"work", {"1", "4", "4c"}},  // 4c: a thread's 4 vectors adjacent (uncoalesced)
                             {"precision", {"fp32", "fp16"}}};
  }
  if (family == "rowreduce") {
    return std::vector<Slot>{{"strategy", {"thread", "warp", "block"}},
                             {"block", {"64", "256", "1024"}},
                             {"vec", {"1", "4"}},
                             {"precision", {"fp32", "fp16"}}};
  }
  if (family == "gemm_epilogue") {
    return std::vector<Slot>{{"gemm", {"cublas", "tiled16", "tiled32x2"}},
                             {"epilogue", {"separate", "fused"}},
                             {"block", {"128", "256", "512"}},
                             {"precision", {"fp32", "fp16"}}};
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown task family \"", family, "\""));
}

std::string DescribeChoice(const std::vector<Slot>& slots, const Choice& choice) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < slots.size(); ++i) parts.push_back(absl::StrCat(slots[i].name, "=", slots[i].options[choice[i]]));
  return absl::StrJoin(parts, " ");
}

std::vector<Choice> AllChoices(const std::vector<Slot>& slots) {
  std::vector<Choice> out;
  Choice c{};
  while (true) {
    out.push_back(c);
    int i = kNumSlots - 1;
    while (i >= 0 && ++c[i] >= static_cast<int>(slots[i].options.size())) c[i--] = 0;
    if (i < 0) return out;
  }
}

std::string ChoiceDigits(const Choice& choice) {
  std::string s;
  for (int v : choice) s += static_cast<char>('0' + v);
  return s;
}

absl::StatusOr<TaskSpec> ParseTaskSpec(const std::string& source) {
  absl::string_view first = absl::string_view(source).substr(0, source.find('\n'));
  if (!absl::ConsumePrefix(&first, kHeader)) return absl::NotFoundError("not a family task (no kernelrl-family line)");
  std::vector<std::string> words = absl::StrSplit(first, ' ', absl::SkipEmpty());
  TaskSpec spec;
  if (words.size() != 2 || !absl::StartsWith(words[1], "ops=")) {
    return absl::InvalidArgumentError(absl::StrCat("bad family line: ", first));
  }
  spec.family = words[0];
  spec.ops = absl::StrSplit(words[1].substr(4), ',', absl::SkipEmpty());
  if (auto slots = Slots(spec.family); !slots.ok()) return slots.status();
  const size_t first_pointwise = spec.family == "rowreduce" ? 1 : 0;
  if (spec.ops.empty() && spec.family != "gemm_epilogue") {
    return absl::InvalidArgumentError(absl::StrCat("family line without ops: ", first));
  }
  if (spec.family == "rowreduce" && !Reductions().count(spec.ops[0])) {
    return absl::InvalidArgumentError(absl::StrCat("unknown row reduction ", spec.ops[0]));
  }
  for (size_t i = first_pointwise; i < spec.ops.size(); ++i) {
    if (FindOp(spec.ops[i]) == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown op ", spec.ops[i]));
  }
  return spec;
}

std::vector<FamilyTask> MakeTasks(const std::string& device) {
  const bool cpu = device == "cpu";
  std::vector<FamilyTask> train, heldout;
  for (const FamilyTable& t : Tables()) {
    const auto& train_shapes = cpu ? t.cpu_train_shapes : t.gpu_train_shapes;
    const auto& heldout_shapes = cpu ? t.cpu_heldout_shapes : t.gpu_heldout_shapes;
    for (const Ops& ops : t.train_ops) {
      for (const Shape& s : train_shapes) train.push_back(Make(t, ops, s, ""));
    }
    for (const Ops& ops : t.heldout_ops) heldout.push_back(Make(t, ops, train_shapes[0], "composition"));
    for (size_t i = 0; i < 2; ++i) {
      for (const Shape& s : heldout_shapes) heldout.push_back(Make(t, t.train_ops[i], s, "shape"));
    }
  }
  train.insert(train.end(), heldout.begin(), heldout.end());
  return train;
}

std::string PointwiseBody(const std::vector<std::string>& ops, const std::string& round, const std::string& indent) {
  std::string out;
  for (const std::string& name : ops) {
    const PointwiseOp* op = FindOp(name);
    const std::string expr = op ? op->c_expr : "v";
    absl::StrAppend(&out, indent, "v = ", round.empty() ? expr : absl::StrCat(round, "(", expr, ")"), ";  // ", name,
                    "\n");
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> Render(const TaskSpec& spec, const Choice& choice,
                                                          const std::string& device) {
  auto slots = Slots(spec.family);
  if (!slots.ok()) return slots.status();
  for (int i = 0; i < kNumSlots; ++i) {
    if (choice[i] < 0 || choice[i] >= static_cast<int>((*slots)[i].options.size())) {
      return absl::InvalidArgumentError(absl::StrCat("slot ", (*slots)[i].name, ": option ", choice[i], " out of range"));
    }
  }
  if (device == "cpu") return RenderCpu(spec, choice);
  if (device == "cuda" || device.empty()) return RenderCuda(spec, choice);
  return absl::InvalidArgumentError(absl::StrCat("device \"", device, "\": cuda or cpu"));
}

}  // namespace kernelrl::data::family
