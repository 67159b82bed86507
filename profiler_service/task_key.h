// Task identity for the baseline cache: one C++ definition, used by the
// baseline import (precompute_baselines) and the sandbox (Evaluator, ReadTaskFile),
// mirrored by profiler_service/harness/tasks.py (task_hash, input_policy_hash)
// on the Python side; //sandbox:profile_cpu_test checks both agree.
//
//   InputPolicyText(device, dtype) = "generator=get_inputs-v6;device=<d>;dtype=<t|task>"
//   InputPolicyHash(device, dtype) = "get_inputs-v6.<d>.<t|task>"      (readable key part;
//                                    ".tf32" appended for baselines timed with TF32 on)
//   TaskHash(source, device, dtype) = sha256_hex(source + "\0" + InputPolicyText)
//
// A baseline and a candidate are comparable only when the same reference
// source ran on inputs drawn the same way on the same kind of device.
#ifndef KERNELRL_PROFILER_SERVICE_TASK_KEY_H_
#define KERNELRL_PROFILER_SERVICE_TASK_KEY_H_

#include <string>

#include "profiler_service/baseline_cache.h"
#include "profiler_service/proto_types.h"

namespace kernelrl {

// v2: timed forwards draw their inputs from the verify distributions and are
// timed in trusted blocks (docs/HARNESS.md); v1 baselines do not compare.
// v3: the trusted figure takes our in-clock copies off at the rates the
// worker's copy probe measured, not at the peak: v2 figures are larger.
// v4: the waits inside the clock poll (no process wake-up in a block's
// figure) and blocks may hold 64 GiB: v3 figures carry more fixed cost.
// v5: a baseline carries the copy rates its figures were taken at, so that a
// candidate timed by another worker is compared at common rates (judge.h).
// v6: the seal is taken off at its own GPU time in the block (a baseline's
// 0.4-0.7 ms a block more than at the probe's rate on an H200).
inline constexpr char kInputPolicyVersion[] = "get_inputs-v6";

std::string InputPolicyText(const std::string& device, const std::string& dtype);
std::string InputPolicyHash(const std::string& device, const std::string& dtype);
std::string TaskHash(const std::string& reference_source, const std::string& device, const std::string& dtype);

// The device a task declares (Task.inputs.device, default "cuda").
std::string DeclaredDevice(const Task& task);
// Task.content_hash as the task registry should fill it (declared device).
std::string ContentHashOf(const Task& task);

// The cache key of `task` timed on `device` ("cuda" or "cpu": where it actually
// runs, which may differ from the declared one on a CPU worker). The task hash
// is recomputed from the source, never taken from the request.
// `tf32`: the task is judged under the tf32 precision policy, whose baselines
// run with TF32 on (a key of its own).
BaselineKey BaselineKeyFor(const Task& task, const std::string& device, const std::string& gpu_model,
                           const std::string& torch_version, bool tf32 = false);

}  // namespace kernelrl

#endif  // KERNELRL_PROFILER_SERVICE_TASK_KEY_H_
