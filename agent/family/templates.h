// The kernel templates of the learnable task family (docs/LEARNING.md): the
// designs the code model writes (docs/CODEMODEL.md) and the scripted engineer
// (agent/policy/engineer_policy.h) renders.
// The tasks themselves (data/family/family.h) are data; these templates are
// what an agent writes, so they sit with the agent, below every service.
//
// Three op families in the KernelBench format (Model, get_inputs,
// get_init_inputs):
//   elementwise    a chain of 2-3 pointwise ops on x[rows, cols]
//   rowreduce      softmax / log_softmax / layernorm / rmsnorm over dim 1,
//                  then an optional pointwise epilogue
//   gemm_epilogue  nn.Linear(K, N) on x[M, K], then 1-2 pointwise ops
// Each task's source opens with one header line the templates read,
//   # kernelrl-family: <family> ops=<op>,<op>,...
// and nothing else about the task is needed to render a kernel: shapes are
// read at run time from the tensors.
//
// Every family has the same action space: kNumSlots design slots, each with
// 2-3 options (slot names and meanings differ per family). A choice vector
// picks one option per slot; Render() turns (task, choice, device) into the
// files an agent writes: model_new.py and kernels/<name>.cu (CUDA) or
// kernels/<name>.cc (the sandbox's CPU backend). The options are real design
// decisions (vector width, block size, work per thread, reduction strategy,
// GEMM implementation, epilogue fusion, precision); "fp16" computes or
// accumulates in half precision, which overflows on the sandbox's
// large-magnitude input set (|x| ~ 1e5) and so is usually a wrong answer.
#ifndef KERNELRL_AGENT_FAMILY_TEMPLATES_H_
#define KERNELRL_AGENT_FAMILY_TEMPLATES_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kernelrl::agent::family {

inline constexpr int kNumSlots = 4;

// The first line of every family task's source, before "<family> ops=...".
inline constexpr char kTaskHeader[] = "# kernelrl-family: ";

// What a task is, as far as the templates care (parsed from the header line).
struct TaskSpec {
  std::string family;            // "elementwise", "rowreduce", "gemm_epilogue"
  std::vector<std::string> ops;  // rowreduce: ops[0] is the reduction, the rest its epilogue
};

struct Slot {
  std::string name;
  std::vector<std::string> options;
};

using Choice = std::array<int, kNumSlots>;

// "gemm_epilogue: relu", "elementwise: gelu -> sigmoid": the task in words, as model.py's docstring,
// a kernel's header and the engineer's plan all write it. Each op is a word after a space, so the
// model's text repeats the docstring's tokens (" relu") rather than tokens of its own ("(relu");
// whether a model names the ops right is tools/codemodel/op_probe.h's to measure.
std::string DescribeTask(const TaskSpec& spec);

// The slots of a family (kNumSlots of them).
absl::StatusOr<std::vector<Slot>> Slots(const std::string& family);
// "vec=4 block=256 work=4 precision=fp32".
std::string DescribeChoice(const std::vector<Slot>& slots, const Choice& choice);
// Every choice of a family, in lexicographic order of option indices.
std::vector<Choice> AllChoices(const std::vector<Slot>& slots);
// "2103" <-> {2,1,0,3}.
std::string ChoiceDigits(const Choice& choice);

// The header line of a task source; NotFound when there is none (not a family task).
absl::StatusOr<TaskSpec> ParseTaskSpec(const std::string& source);
// The spec of the first header line anywhere in `text` (a tool's output that shows model.py,
// a rendered chat); NotFound when `text` has none.
absl::StatusOr<TaskSpec> FindTaskSpec(const std::string& text);

// Whether cuBLASLt's epilogue applies a GEMM task's whole pointwise chain (a
// lone ReLU): then the fused cuBLAS design runs no kernel of its own. The CUDA
// template finds this on the host from its own act() (so its text depends on the
// task only in the ops' lines); the corpus's modelled GPU time reads it here.
bool CublasLtAppliesChain(const TaskSpec& spec);

// The candidate files for `spec` built with `choice`, for device "cuda" or "cpu".
absl::StatusOr<std::map<std::string, std::string>> Render(const TaskSpec& spec, const Choice& choice,
                                                          const std::string& device);

// The ops the families are made of.
struct PointwiseOp {
  const char* name;
  const char* torch_line;  // Python statement on x.
  const char* c_expr;      // C expression of float v (math.h functions).
};
const PointwiseOp* FindOp(const std::string& name);
// The spec's pointwise ops: all of them but a row family's first, its reduction.
std::vector<std::string> PointwiseOps(const TaskSpec& spec);
// Row reductions: the Python statement of each (over dim 1 of a 2-D x).
const std::map<std::string, std::string>& Reductions();

// Implementation pieces (render_cuda.cc, render_cpu.cc, ops.cc).
// model_new.py of the family (the same for every choice and both devices).
std::string ModelNewSource(const TaskSpec& spec);
absl::StatusOr<std::map<std::string, std::string>> RenderCuda(const TaskSpec& spec, const Choice& choice);
absl::StatusOr<std::map<std::string, std::string>> RenderCpu(const TaskSpec& spec, const Choice& choice);
// "// name\nv = f(v);\n" for each pointwise op (epilogue or chain); `round`
// wraps each result (half-precision emulation) when not empty.
std::string PointwiseBody(const std::vector<std::string>& ops, const std::string& round, const std::string& indent);

}  // namespace kernelrl::agent::family

#endif  // KERNELRL_AGENT_FAMILY_TEMPLATES_H_
