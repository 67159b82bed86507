// Where the CUDA toolkit is when a config does not say: the one default for
// SandboxConfig.cuda_home (the compiler's nvcc, the candidates' rpath) and
// WorkspaceIsolation.cuda_home (the agent shell's PATH).
#ifndef KERNELRL_COMMON_TOOLKIT_H_
#define KERNELRL_COMMON_TOOLKIT_H_

namespace kernelrl {

inline constexpr char kDefaultCudaHome[] = "/usr/local/cuda";

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_TOOLKIT_H_
