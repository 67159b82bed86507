// KernelClassifier says where a recorded GPU activity came from:
//   "candidate"  a kernel whose name is one of the candidate's own symbols
//                (read from its compiled artifacts by the harness);
//   "cudnn", "cublas"  vendor-library kernels, recognised by name patterns;
//   "torch"      ATen / c10 / Inductor (triton_) kernels;
//   "copy"       memcpy / memset activity;
//   "other"      anything else.
// Names are matched both mangled and demangled. The candidate set wins over
// the patterns: a candidate kernel named "my_gemm" is the candidate's, while a
// library kernel can never be passed off as the candidate's unless its exact
// symbol is in the candidate's artifact (which the sandbox builds itself).
#ifndef KERNELRL_PROFILER_SERVICE_KERNEL_CLASSIFIER_H_
#define KERNELRL_PROFILER_SERVICE_KERNEL_CLASSIFIER_H_

#include <string>
#include <unordered_set>
#include <vector>

namespace kernelrl {

class KernelClassifier {
 public:
  explicit KernelClassifier(const std::vector<std::string>& candidate_symbols);

  // `kind` is the RawTimingRun activity kind: "kernel", "memcpy", "memset".
  std::string Classify(const std::string& name, const std::string& kind) const;

 private:
  bool IsCandidate(const std::string& name, const std::string& demangled) const;
  std::unordered_set<std::string> symbols_;
  std::unordered_set<std::string> base_names_;  // Demangled names without arguments.
};

// Demangled name, or the input if it does not demangle.
std::string Demangle(const std::string& name);
// "ns::kernel<T>(args)" -> "ns::kernel<T>"; "void ns::k(int)" -> "ns::k".
std::string BaseName(const std::string& demangled);

}  // namespace kernelrl

#endif  // KERNELRL_PROFILER_SERVICE_KERNEL_CLASSIFIER_H_
