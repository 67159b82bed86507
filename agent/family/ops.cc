// The family's ops and slots; Render() dispatches to the CUDA or CPU templates.
#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "agent/family/templates.h"

namespace kernelrl::agent::family {
namespace {

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

}  // namespace

const std::map<std::string, std::string>& Reductions() {
  static const auto* m = new std::map<std::string, std::string>{
      {"softmax", "x = torch.softmax(x, dim=1)"},
      {"log_softmax", "x = torch.log_softmax(x, dim=1)"},
      {"layernorm", "x = F.layer_norm(x, (x.shape[1],), eps=1e-5)"},
      {"rmsnorm", "x = x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + 1e-6)"},
  };
  return *m;
}

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

std::string DescribeTask(const TaskSpec& spec) {
  return absl::StrCat(spec.family, ": ", absl::StrJoin(spec.ops, " -> "));
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

bool CublasLtAppliesChain(const TaskSpec& spec) {
  return spec.family == "gemm_epilogue" && spec.ops == std::vector<std::string>{"relu"};
}

absl::StatusOr<TaskSpec> ParseTaskSpec(const std::string& source) {
  absl::string_view first = absl::string_view(source).substr(0, source.find('\n'));
  if (!absl::ConsumePrefix(&first, kTaskHeader)) return absl::NotFoundError("not a family task (no kernelrl-family line)");
  std::vector<std::string> words = absl::StrSplit(first, ' ', absl::SkipEmpty());
  TaskSpec spec;
  if (words.size() != 2 || !absl::StartsWith(words[1], "ops=")) {
    return absl::InvalidArgumentError(absl::StrCat("bad family line: ", first));
  }
  spec.family = words[0];
  spec.ops = absl::StrSplit(words[1].substr(4), ',', absl::SkipEmpty());
  if (auto slots = Slots(spec.family); !slots.ok()) return slots.status();
  if (spec.ops.empty() && spec.family != "gemm_epilogue") {
    return absl::InvalidArgumentError(absl::StrCat("family line without ops: ", first));
  }
  if (spec.family == "rowreduce" && !Reductions().count(spec.ops[0])) {
    return absl::InvalidArgumentError(absl::StrCat("unknown row reduction ", spec.ops[0]));
  }
  for (const std::string& op : PointwiseOps(spec)) {
    if (FindOp(op) == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown op ", op));
  }
  return spec;
}

absl::StatusOr<TaskSpec> FindTaskSpec(const std::string& text) {
  const size_t p = text.find(kTaskHeader);
  if (p == std::string::npos) return absl::NotFoundError("no kernelrl-family line");
  return ParseTaskSpec(text.substr(p, text.find('\n', p) - p));
}

std::vector<std::string> PointwiseOps(const TaskSpec& spec) {
  const size_t first = spec.family == "rowreduce" ? 1 : 0;
  return std::vector<std::string>(spec.ops.begin() + std::min(first, spec.ops.size()), spec.ops.end());
}

std::string PointwiseBody(const std::vector<std::string>& ops, const std::string& round, const std::string& indent) {
  std::string out;
  for (const std::string& name : ops) {
    const PointwiseOp* op = FindOp(name);
    const std::string expr = op ? op->c_expr : "v";
    // The op's name on a line of its own, before its expression: the name is what the task states
    // (model.py's ops=), and the expression follows from it.
    absl::StrAppend(&out, indent, "// ", name, "\n", indent, "v = ",
                    round.empty() ? expr : absl::StrCat(round, "(", expr, ")"), ";\n");
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

}  // namespace kernelrl::agent::family
