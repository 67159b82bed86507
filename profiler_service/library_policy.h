// The default vendor-library policy of a task, read from its reference source
// when the Task carries none: the paper's rule is cuBLAS only for GEMM-type
// tasks and cuDNN only for convolution-type tasks, so a candidate may lean on
// the library where the reference's heavy op is that library's job, and
// nowhere else.
//
//   allow_cublas: nn.Linear / nn.Bilinear / F.linear, torch.matmul / mm / bmm /
//                 addmm / baddbmm / einsum / tensordot, `.matmul(`, `@`
//   allow_cudnn:  nn.Conv* / nn.ConvTranspose* / F.conv*, nn.LSTM / GRU / RNN
//
// Comments and docstrings are not read (a mention of "matmul" in prose does
// not open cuBLAS).
#ifndef KERNELRL_PROFILER_SERVICE_LIBRARY_POLICY_H_
#define KERNELRL_PROFILER_SERVICE_LIBRARY_POLICY_H_

#include <string>

#include "profiler_service/proto_types.h"

namespace kernelrl {

LibraryPolicy DefaultLibraryPolicy(const std::string& reference_source);

// The task's own policy if it has one, else DefaultLibraryPolicy of its source.
LibraryPolicy EffectiveLibraryPolicy(const Task& task);

}  // namespace kernelrl

#endif  // KERNELRL_PROFILER_SERVICE_LIBRARY_POLICY_H_
