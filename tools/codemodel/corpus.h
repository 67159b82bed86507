// The code model's pre-training corpus: whole agentic trajectories on the
// family's training tasks, produced by running the actor's own rollout loop
// (actor/rollout.h: the real system and task prompts, ChatML, JSON tool calls
// parsed by the actor, the real Read/Write/Edit tools in a real workspace, the
// real verdict texts) with a scripted engineer in the policy's seat.
//
// The engineer (CorpusAgent) writes what a model is to learn to write:
//   turn 0  a sentence about the task, Read model.py
//   turn 1  the design it picks, Write kernels/<family>.cu (the family's
//           template rendered with that design, sometimes with a planted
//           fault: a missing ';', a misspelt member, an undeclared name),
//           Write model_new.py, Compile
//   then    on COMPILE_ERROR: Edit the faulty line back, Compile; on Compile
//           OK: Verify; on WRONG_ANSWER (fp16 under the strict precision
//           policy): rewrite in fp32 (Edit of the one changed line, or Write
//           of the whole file), Verify; on Verify OK: Profile; after a
//           Profile: another design (one slot changed) up to `revisions`
//           times, back to the best one seen if the last was slower, then a
//           closing reply without a tool call.
// So every design choice is in the code tokens (the #defines, the header
// comment, the pointwise code), and the trajectories are >= 4 turns.
//
// The verdicts come from DesignEvaluator, a model of the sandbox for the
// corpus only: it reads the kernel file back, finds the rendering (or the
// faulty near-rendering) it is, and answers COMPILE_ERROR with a diagnostic
// at the faulty line, WRONG_ANSWER for fp16 designs, or OK with a speed from
// a per-family cost table (in which the best rowreduce strategy depends on
// the row length). These numbers are not measurements: training (RFT, PPO)
// is paid by the real sandbox; the corpus teaches the format and the loop.
// Thread-safe (one CorpusAgent and one DesignEvaluator serve many rollouts).
#ifndef KERNELRL_TOOLS_CODEMODEL_CORPUS_H_
#define KERNELRL_TOOLS_CODEMODEL_CORPUS_H_

#include <cstdint>
#include <map>
#include <random>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "actor/evaluation.h"
#include "agent/family/templates.h"
#include "agent/policy/policy.h"
#include "common/json.h"
#include "proto/actor_config.pb.h"
#include "proto/task.pb.h"
#include "proto/trajectory.pb.h"

namespace kernelrl::codemodel {

struct CorpusAgentOptions {
  double fault_rate = 0.35;  // First kernel written with a planted fault.
  double fp16_rate = 0.25;   // First design in fp16 (fails Verify, then fixed).
  int revisions = 2;         // Design changes after the first Profile.
  std::string device;        // "" = the task's inputs.device ("cpu" or cuda).
};

// A planted fault: the text it replaces, and what a compiler says about it.
struct Fault {
  std::string broken_line;  // The faulty line as written.
  int line = 0;             // 1-based line in the kernel file.
  std::string message;      // The compiler's message.
};

// Which rendering `kernel` is: its choice, and the fault when it differs from
// that rendering in exactly one line by one of the planted faults. NotFound
// when it is no rendering of the family's template.
struct Recognised {
  agent::family::Choice choice{};
  bool faulty = false;
  Fault fault;
};
absl::StatusOr<Recognised> RecogniseKernel(const agent::family::TaskSpec& spec, const std::string& device,
                                           const std::string& kernel);

class CorpusAgent final : public agent::PolicyClient {
 public:
  CorpusAgent(const agent::Tokenizer* tokenizer, int32_t im_end_id, CorpusAgentOptions options, uint64_t seed);

  absl::StatusOr<agent::PolicyResponse> Generate(const agent::PolicyRequest& request) override;

 private:
  struct Episode;
  // The next reply of an episode, given what the tools said last.
  absl::StatusOr<std::string> Next(Episode& e, const std::string& observation);

  const agent::Tokenizer* const tokenizer_;
  const int32_t im_end_id_;
  const CorpusAgentOptions options_;
  absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Episode>> episodes_ ABSL_GUARDED_BY(mu_);
};

class DesignEvaluator final : public actor::EvaluationClient {
 public:
  v1::Verdict Evaluate(const v1::EvaluateRequest& request) override;
};

// The speed-up over eager the cost table gives a design on a task of `shape`
// ({rows, cols} or {M, K, N}); the same for both devices.
double ModelledSpeedup(const agent::family::TaskSpec& spec, const agent::family::Choice& choice, const std::vector<int64_t>& shape);

// One corpus line: {"task_id", "family", "reward", "messages": [{"role", "content"}...]}.
Json CorpusRecord(const v1::Trajectory& trajectory, const std::string& family);

// The corpus of `tasks` (per_task episodes each) through the actor's rollout
// loop with `rollout`'s prompts (its turn and token limits are lifted; the
// workspaces live under workspace_root), and what the episodes did.
struct Corpus {
  std::vector<Json> records;
  std::map<std::string, int64_t> tool_calls;  // By tool name.
  int64_t failed_evaluations = 0;            // Compile / Verify errors the episodes then fixed.
  int64_t final_ok = 0;                      // Final verdicts OK.
  int64_t assistant_turns = 0;
};
absl::StatusOr<Corpus> MakeCorpus(const std::vector<v1::Task>& tasks, int per_task, v1::RolloutConfig rollout,
                                  const std::string& skill_text, const CorpusAgentOptions& options, uint64_t seed,
                                  const std::string& workspace_root);

}  // namespace kernelrl::codemodel

#endif  // KERNELRL_TOOLS_CODEMODEL_CORPUS_H_
