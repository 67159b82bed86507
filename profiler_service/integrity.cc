#include "profiler_service/integrity.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "profiler_service/kernel_classifier.h"

namespace kernelrl {

IntegrityReport AnalyzeIntegrity(const ProfileMeasurement& m, const LibraryPolicy& policy,
                                 const ProfilerConfig& config, int max_records) {
  IntegrityReport r;
  const RawTimingRun& run = m.candidate();
  if (run.backend() == "cpu" || !run.cupti_active()) return r;

  const KernelClassifier classifier(
      std::vector<std::string>(m.candidate_symbols().begin(), m.candidate_symbols().end()));
  const std::set<uint64_t> harness_streams(run.harness_stream_ids().begin(),
                                           run.harness_stream_ids().end());
  std::map<std::string, double> by_origin;
  std::set<uint64_t> streams;
  bool side_stream = false, foreign_thread = false;
  // Per (name, origin, stream) for the top-kernel list.
  std::map<std::tuple<std::string, std::string, uint64_t>, std::pair<int, double>> records;
  for (const KernelActivity& a : run.activities()) {
    const std::string origin = classifier.Classify(a.name(), a.kind());
    by_origin[origin] += a.total_us();
    streams.insert(a.stream_id());
    if (!harness_streams.empty() && !harness_streams.count(a.stream_id())) side_stream = true;
    if (a.thread_id() != 0 && run.harness_thread_id() != 0 &&
        a.thread_id() != run.harness_thread_id()) {
      foreign_thread = true;
    }
    auto& rec = records[{a.name(), origin, a.stream_id()}];
    rec.first += a.count();
    rec.second += a.total_us();
  }

  KernelCoverage& cov = r.coverage;
  double total = 0.0;
  // The window may also hold the harness's own work (the executor's fallback
  // copy of an output it could not export into the exchange: memcpy; harness
  // kernels): neither the candidate's work nor a library's, so neither counts
  // toward the share. A candidate's own memcpys are left out with them: its
  // outputs are compared whatever moved them.
  for (const auto& [origin, us] : by_origin) {
    if (origin != "copy" && origin != "harness") total += us;
  }
  cov.set_total_gpu_us(total);
  cov.set_own_kernel_us(by_origin["candidate"]);
  cov.set_library_kernel_us(by_origin["cublas"] + by_origin["cudnn"]);
  cov.set_other_kernel_us(by_origin["torch"] + by_origin["other"] + by_origin["harness"]);
  cov.set_memcpy_us(by_origin["copy"]);
  cov.set_num_streams(static_cast<int>(streams.size()));
  std::vector<KernelRecord> top;
  for (const auto& [key, v] : records) {
    KernelRecord k;
    k.set_name(Demangle(std::get<0>(key)));
    k.set_origin(std::get<1>(key));
    k.set_stream_id(std::get<2>(key));
    k.set_count(v.first);
    k.set_total_us(v.second);
    top.push_back(k);
  }
  std::sort(top.begin(), top.end(),
            [](const KernelRecord& a, const KernelRecord& b) { return a.total_us() > b.total_us(); });
  for (int i = 0; i < static_cast<int>(top.size()) && i < max_records; ++i) *cov.add_kernels() = top[i];

  // Library kernels the policy allows count as the candidate's work (a GEMM
  // task's cuBLAS call is the intended path). Without kernels of its own a
  // candidate passes only if every kernel it ran is such a library's: a fused
  // library call (cuBLASLt's bias + ReLU epilogue, cuDNN's conv + bias +
  // activation) is library awareness, as the paper's rules allow; torch ops
  // beside it are not.
  const double allowed_library =
      (policy.allow_cublas() ? by_origin["cublas"] : 0.0) + (policy.allow_cudnn() ? by_origin["cudnn"] : 0.0);
  r.own_share = total > 0 ? (cov.own_kernel_us() + allowed_library) / total : 0.0;
  const double min_share =
      policy.min_own_kernel_share() > 0 ? policy.min_own_kernel_share() : config.min_own_kernel_share();
  const bool allowed_library_only = allowed_library > 0.0 && allowed_library >= total;
  if (cov.own_kernel_us() <= 0.0 && !allowed_library_only) r.flags.push_back("no_candidate_kernels");
  if (r.own_share < min_share) r.flags.push_back("own_kernel_share_below_min");
  if (cov.own_kernel_us() <= 0.0 && cov.library_kernel_us() > 0.0 && !allowed_library_only) {
    r.flags.push_back("library_only");
  }
  if (by_origin["cublas"] > 0.0 && !policy.allow_cublas()) r.flags.push_back("forbidden_library_cublas");
  if (by_origin["cudnn"] > 0.0 && !policy.allow_cudnn()) r.flags.push_back("forbidden_library_cudnn");
  if (side_stream) r.flags.push_back("side_stream");
  if (foreign_thread) r.flags.push_back("foreign_launch_thread");
  if (run.outside_window_gpu_us() > config.outside_window_tolerance() * std::max(total, 1.0)) {
    r.flags.push_back("work_outside_window");
  }
  return r;
}

}  // namespace kernelrl
