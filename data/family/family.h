// A task family an RL agent can learn: KernelBench-format tasks of three op
// families (agent/family/templates.h says what they are and how a choice
// renders a kernel for them), split into training and held-out tasks.
#ifndef KERNELRL_DATA_FAMILY_FAMILY_H_
#define KERNELRL_DATA_FAMILY_FAMILY_H_

#include <cstdint>
#include <string>
#include <vector>

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

}  // namespace kernelrl::data::family

#endif  // KERNELRL_DATA_FAMILY_FAMILY_H_
