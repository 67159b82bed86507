// Where a GPU step's time goes: Kineto records `steps` calls of `step`, and
// the kernels' GPU time is summed per name, largest first, one JSON line
// each (after a header line with the total), so the next kernel to write
// targets real time. Shared by the learner and engine benchmarks.
#ifndef KERNELRL_LEARNER_BENCH_KERNEL_PROFILE_H_
#define KERNELRL_LEARNER_BENCH_KERNEL_PROFILE_H_

#include <functional>
#include <string>

namespace kernelrl::learner::bench {

// `header`: the JSON fields (no braces) of the total's line, to which
// "gpu_ms_per_step" is appended. Prints the top `rows` kernels.
void PrintKernelProfile(const std::function<void()>& step, int steps, const std::string& header, int rows = 40);

}  // namespace kernelrl::learner::bench

#endif  // KERNELRL_LEARNER_BENCH_KERNEL_PROFILE_H_
