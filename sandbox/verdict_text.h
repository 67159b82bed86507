// The texts a verdict's summary is made of, one definition each. The sandbox
// writes them, and the code model's corpus (tools/codemodel/corpus.h) writes
// the same ones from its model of the sandbox: a model pre-trained on that
// corpus reads in training exactly what the tools show it in a rollout (a
// corpus whose "Verify: OK" differed from the sandbox's left every rollout
// off the rails right after its first passing Verify).
#ifndef KERNELRL_SANDBOX_VERDICT_TEXT_H_
#define KERNELRL_SANDBOX_VERDICT_TEXT_H_

#include <string>
#include <vector>

namespace kernelrl::sandbox {

// BAD_WORKSPACE when the workspace has no model_new.py.
inline constexpr char kModelNewMissing[] = "model_new.py (defining ModelNew) is missing";

// The verify sets' input distributions, in order, when the task names none.
const std::vector<std::string>& DefaultDistributions();

// OK from the verify stage: "correct on 5 input sets (task, normal, ...)".
std::string CorrectOnSets(const std::vector<std::string>& dists);

// A compiler's error as the summary quotes it: "kernels/k.cu:12: message"
// (no line when line <= 0).
std::string CompileErrorAt(const std::string& file, int line, const std::string& message);

// COMPILE_ERROR: "compile failed (N errors): <first error>"; the count and
// the first error are left out when absent.
std::string CompileFailed(int errors, const std::string& first_error);

// A profiled OK: the verify stage's summary, then the judge's.
std::string WithProfile(const std::string& verify_summary, const std::string& judged);

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_VERDICT_TEXT_H_
