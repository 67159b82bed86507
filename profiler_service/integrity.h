// IntegrityAnalysis answers "did the candidate's own kernels run and do the
// work?" from the CUPTI activity of its timed calls:
//   * KernelCoverage: GPU time by origin (candidate / cublas / cudnn / torch /
//     other / copies), streams used, top kernels;
//   * flags:
//       no_candidate_kernels         none of the candidate's kernels ran;
//       own_kernel_share_below_min   candidate (+ allowed library) kernels < min share of GPU time
//                                    (LibraryPolicy.min_own_kernel_share, else config);
//       library_only                 library kernels ran and no candidate kernel did;
//       forbidden_library_cublas / forbidden_library_cudnn   per LibraryPolicy;
//       side_stream                  activity on a stream the harness did not issue on;
//       foreign_launch_thread        activity launched by a thread other than the harness's;
//       work_outside_window          GPU work of foreign threads between timing windows
//                                    above outside_window_tolerance of in-window time.
// Only the CUDA backend has activity; the CPU backend returns no flags.
#ifndef KERNELRL_PROFILER_SERVICE_INTEGRITY_H_
#define KERNELRL_PROFILER_SERVICE_INTEGRITY_H_

#include <string>
#include <vector>

#include "profiler_service/proto_types.h"

namespace kernelrl {

struct IntegrityReport {
  KernelCoverage coverage;
  std::vector<std::string> flags;
  double own_share = 0.0;  // (candidate + policy-allowed library kernel time) / total GPU time.
};

// `config` must carry defaults. At most `max_records` KernelRecords are kept.
IntegrityReport AnalyzeIntegrity(const ProfileMeasurement& m, const LibraryPolicy& policy,
                                 const ProfilerConfig& config, int max_records = 20);

}  // namespace kernelrl

#endif  // KERNELRL_PROFILER_SERVICE_INTEGRITY_H_
