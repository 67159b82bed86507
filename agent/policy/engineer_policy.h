// EngineerPolicy: a scripted kernel engineer for the task family
// (agent/family/templates.h). It writes what the code model is to learn to
// write, as JSON tool calls in its reply text like any model, and reacts to
// what the tools answer:
//   turn 0  a sentence, Read model.py (or only its first lines)
//   turn 1  the task (read from model.py's kernelrl-family line) and the
//           design it picks, Write kernels/<family>.cu|.cc (the template
//           rendered with that design; sometimes with a planted fault: a
//           missing ';', a misspelt member, an undeclared name), Write
//           model_new.py, Compile
//   then    COMPILE_ERROR: Edit the faulty line back, Compile; Compile OK:
//           Verify; WRONG_ANSWER (fp16 under the strict precision policy):
//           back to fp32 (Edit / MultiEdit of the changed lines, or Write of
//           the whole file), Verify; Verify OK: Profile; after a Profile:
//           another design (one slot changed) up to `revisions` times, back
//           to the best one seen if the last was slower, then a closing
//           reply without a tool call (with `stop_at_reward`, a Profile
//           paying that much closes at once).
// With `rewrite_kernel` each change of the kernel after its first Write is a
// Write of the whole file; with `shell_changes` a design change is a Bash sed
// and back to the best a Bash cp of a saved copy.
// Its design choices are in the code it writes (#defines, the header
// comment). Uses: the code model's corpus (tools/codemodel/corpus.h) and the
// recipe's warm-up data (policy.kind "engineer" / "engineer_cpu": real
// sandbox verdicts for RFT). Its log-probs are 0: they are no model's, and
// only RFT and value pretraining, which ignore them, use its trajectories.
// Episodes are keyed by the request id's trajectory part. Thread-safe.
#ifndef KERNELRL_AGENT_POLICY_ENGINEER_POLICY_H_
#define KERNELRL_AGENT_POLICY_ENGINEER_POLICY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "agent/family/templates.h"
#include "agent/policy/policy.h"
#include "common/json.h"

namespace kernelrl::agent {

struct EngineerPolicyOptions {
  double fault_rate = 0.35;  // First kernel written with a planted fault.
  double fp16_rate = 0.25;   // First design in fp16 (fails Verify, then fixed).
  int revisions = 2;         // Design changes after the first Profile.
  // > 0: a Profile that pays at least this much ends the episode (a closing reply naming the
  // reward and both speed-ups), and each revision says the reward and speed-ups it revises from:
  // the reply after a verdict then depends on what the verdict said. 0: every Profile is
  // followed by a revision while any are left, whatever it paid.
  int stop_at_reward = 0;
  int read_lines = 0;        // Read only model.py's first lines, its family header (0: the whole file).
  // Every change of the kernel after its first Write (a fix, back to fp32, a revision, back to the
  // best) writes the whole file again instead of an Edit / MultiEdit of the changed lines. An edit's
  // old_string must copy the file's line exactly, the header naming the current design included: a
  // small model recalls the design it usually writes rather than the one it sampled, and the edit
  // fails whole ("old_string was not found"; 87 of 101 MultiEdits in a PPO run, docs/CODEMODEL.md).
  // A rewrite names the new design in tokens the model writes afresh.
  bool rewrite_kernel = false;
  // A design change is a Bash `sed -i` of the header's design and the changed #define lines (when
  // nothing else differs: elementwise's fp16 body does), and back to the best a Bash `cp` of the
  // copy (kBestKernelCopy) that a revision away from the best saved first. A rewrite restates the
  // kernel's ops from memory: 17 of 41 PPO trajectories of a rewriting policy (H200) passed, then
  // ended on a WRONG_ANSWER rewrite that named ops the task does not have ("softmax -> scale" for
  // a softmax), and none went back. A sed leaves the op lines as they were written.
  bool shell_changes = false;
  std::string device = "cuda";  // Kernels for "cuda" (.cu) or "cpu" (.cc).
  int64_t policy_version = 0;   // Reported with every reply.
};

// A planted fault: turns one clean line into a faulty one (nullopt: not
// applicable to that line), and what a compiler answers.
struct FaultKind {
  std::optional<std::string> (*apply)(const std::string& line);
  const char* cuda_message;
  const char* cpu_message;
};
const std::vector<FaultKind>& Faults();

// Where shell_changes keeps the best design's kernel (a .txt: the sandbox compiles no copy of it).
inline constexpr char kBestKernelCopy[] = "best_kernel.txt";

// The Bash command that turns kernel `from` into `to` when they differ only in the header's
// design and in #define values: `sed -i` of those lines of `path`. nullopt when any other line
// differs.
std::optional<std::string> SedForDesignChange(const std::string& path, const std::string& from, const std::string& to);

// The kernels/ entry of a rendering.
std::string KernelPathOf(const std::map<std::string, std::string>& files);

class EngineerPolicy final : public PolicyClient {
 public:
  EngineerPolicy(const Tokenizer* tokenizer, int32_t im_end_id, EngineerPolicyOptions options, uint64_t seed);

  absl::StatusOr<PolicyResponse> Generate(const PolicyRequest& request) override;

 private:
  struct Episode;
  // The next reply of an episode, given what the tools said since the last one.
  absl::StatusOr<std::string> Next(Episode& e, const std::string& observation);

  const Tokenizer* const tokenizer_;
  const int32_t im_end_id_;
  const EngineerPolicyOptions options_;
  absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Episode>> episodes_ ABSL_GUARDED_BY(mu_);
  uint64_t uses_ ABSL_GUARDED_BY(mu_) = 0;  // Replies so far.
  static constexpr uint64_t kMaxIdleEpisodes = 1024;
};

}  // namespace kernelrl::agent

#endif  // KERNELRL_AGENT_POLICY_ENGINEER_POLICY_H_
