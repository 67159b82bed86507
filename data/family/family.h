// A task family an RL agent can learn: KernelBench-format tasks of three op
// families (agent/family/templates.h says what they are and how a choice
// renders a kernel for them), split into training and held-out tasks.
#ifndef KERNELRL_DATA_FAMILY_FAMILY_H_
#define KERNELRL_DATA_FAMILY_FAMILY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/family/templates.h"

namespace kernelrl::data::family {

// One generated task of the family.
struct FamilyTask {
  agent::family::TaskSpec spec;
  std::vector<int64_t> shape;  // {rows, cols} or, for gemm_epilogue, {M, K, N}
  bool held_out = false;
  std::string split_reason;    // "composition", "shape" or "" (training)
  std::string id;              // "train/ew_gelu-sigmoid_4096x4096"
  std::string source;          // The KernelBench Python file.
};

// The family's tasks at GPU ("cuda") or CPU ("cpu") sizes, training tasks
// first. Held-out tasks differ from every training task by composition (an
// op combination never trained on) or by shape (a size never trained on).
std::vector<FamilyTask> MakeTasks(const std::string& device);

// Tasks for the code model's corpus alone, which make reading the task pay: `per_family`
// compositions a family (fewer where a family has no more) drawn from `seed` (each family's own reductions, then pointwise ops of
// any family), none a training or held-out composition and none holding any family's held-out
// composition as consecutive ops, each at one of the family's training shapes (for `device`). Id
// "reading/<name>", split_reason "reading", not held out: no job trains or evaluates on them,
// so none needs a baseline.
std::vector<FamilyTask> MakeReadingTasks(const std::string& device, int per_family, uint64_t seed);

// One task outside the split, named as a task id's last part ("ge_relu_2048x256x4096":
// family abbreviation, ops joined by '-', shape joined by 'x'), with id "probe/<name>":
// sizes measured on the GPU before they are chosen for a split. InvalidArgument for a
// name that is not a family's ops at a shape of the family's rank.
absl::StatusOr<FamilyTask> MakeProbe(const std::string& name);

}  // namespace kernelrl::data::family

#endif  // KERNELRL_DATA_FAMILY_FAMILY_H_
