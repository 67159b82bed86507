// The code model's pre-training corpus: whole agentic trajectories on the
// family's training tasks, produced by running the actor's own rollout loop
// (actor/rollout.h: the real system and task prompts, ChatML, JSON tool calls
// parsed by the actor, the real Read/Write/Edit tools in a real workspace, the
// real verdict texts) with a scripted engineer in the policy's seat.
//
// The engineer is agent/policy/engineer_policy.h: it reads model.py, writes
// complete kernels/*.cu and model_new.py (the family's templates rendered
// with varied designs, some with a planted fault), compiles, verifies,
// profiles, reads each verdict and revises, in >= 4 turns.
//
// The verdicts come from DesignEvaluator, a model of the sandbox for the
// corpus only: it reads the kernel file back, finds the rendering (or the
// faulty near-rendering) it is, and answers COMPILE_ERROR with a diagnostic
// at the faulty line, WRONG_ANSWER for fp16 designs, or OK with a speed from
// a per-family cost table (in which the best rowreduce strategy depends on
// the row length). These numbers are not measurements: training (RFT, PPO)
// is paid by the real sandbox; the corpus teaches the format and the loop.
// Its texts are the sandbox's own (sandbox/verdict_text.h, the judge's
// JudgedOk, nvcc's warnings on the templates): the model reads in the
// corpus what the tools will show it.
// Thread-safe.
#ifndef KERNELRL_TOOLS_CODEMODEL_CORPUS_H_
#define KERNELRL_TOOLS_CODEMODEL_CORPUS_H_

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "actor/evaluation.h"
#include "agent/family/templates.h"
#include "agent/policy/engineer_policy.h"
#include "common/json.h"
#include "proto/actor_config.pb.h"
#include "proto/task.pb.h"
#include "proto/trajectory.pb.h"

namespace kernelrl::codemodel {

// A planted fault as the evaluator finds it.
struct Fault {
  std::string broken_line;  // The faulty line as written.
  int line = 0;             // 1-based line in the kernel file.
  std::string message;      // The compiler's message.
};

// Which rendering `kernel` is: its choice, and the fault when it differs from
// that rendering in exactly one line by one of the planted faults. The whole file
// is compared first, then its code alone (`//` comment lines left out): a header
// naming another design than the code's is the code's design, or, where designs
// compile to the same code, the first of them. NotFound when it is no rendering
// of the family's template.
struct Recognised {
  agent::family::Choice choice{};
  bool faulty = false;
  Fault fault;  // When faulty.
};
absl::StatusOr<Recognised> RecogniseKernel(const agent::family::TaskSpec& spec, const std::string& device,
                                           const std::string& kernel);

// The design whose rendering `kernel`'s code (`//` comment lines left out) is
// nearest to, counting the lines of both outside their longest common
// subsequence (one line replaced counts 2). NotFound when no rendering is
// within `max_edits`, or two are equally near: the design a kernel that is no
// clean rendering (a garbled line, a #define out of its range) was written as.
struct NearRendering {
  agent::family::Choice choice{};
  int edits = 0;
};
absl::StatusOr<NearRendering> NearestRendering(const agent::family::TaskSpec& spec, const std::string& device,
                                               const std::string& kernel, int max_edits);

// Whether `kernel`'s code holds the op lines of `spec`'s pointwise ops as the templates write
// them (plain or rounded through to_half), in order, with no other op line beside them; a
// comment naming another op changes nothing. True for a spec without pointwise ops.
bool OpLinesRight(const agent::family::TaskSpec& spec, const std::string& kernel);

// A design this much faster than eager or more is graph-timed in DesignEvaluator's Profile; one
// slower has no graph-replayed figure and is held to the baseline's (flag held_to_baseline_graph),
// as forwards past ProfilerConfig.graph_below_us are on a GPU.
inline constexpr double kGraphedAboveSpeedup = 0.05;

class DesignEvaluator final : public actor::EvaluationClient {
 public:
  v1::Verdict Evaluate(const v1::EvaluateRequest& request) override;
};

// The speed-up over eager the cost table gives a design on a task of `shape`
// ({rows, cols} or {M, K, N}); the same for both devices.
double ModelledSpeedup(const agent::family::TaskSpec& spec, const agent::family::Choice& choice, const std::vector<int64_t>& shape);

// The warnings nvcc gives a clean rendering of `choice` (as the H200's compiles of the templates
// gave them): a tiled GEMM's unused cuBLAS handle; a thread-per-row reduction's unreachable
// shuffle loop, once per instantiation. File, line and message as the sandbox parses them.
std::vector<v1::CompileDiagnostic> ModelledWarnings(const agent::family::TaskSpec& spec,
                                                     const agent::family::Choice& choice, const std::string& path,
                                                     const std::string& kernel);

// One corpus line: {"task_id", "family", "reward", "tools_announced", "messages": [{"role", "content"}...]};
// tools_announced: the system turn announced the tool schemas (RolloutConfig.omit_tool_schemas_from_prompt off).
// An assistant message whose written code the next verdict rejected (COMPILE_ERROR, WRONG_ANSWER: a
// planted fault, an fp16 design) has "rejected": true; pre-training may read it as context only
// (RenderRecord's train_rejected), so that a model learns the fix and not the fault.
Json CorpusRecord(const v1::Trajectory& trajectory, const std::string& family, bool tools_announced);

// The corpus of `tasks` (per_task episodes each) through the actor's rollout
// loop with `rollout`'s prompts (its turn and token limits are lifted; the
// workspaces live under workspace_root), and what the episodes did.
struct Corpus {
  std::vector<Json> records;
  std::vector<v1::Trajectory> trajectories;  // The same episodes as the actor built them.
  std::map<std::string, int64_t> tool_calls;  // By tool name.
  int64_t failed_evaluations = 0;            // Compile / Verify errors the episodes then fixed.
  int64_t final_ok = 0;                      // Final verdicts OK.
  int64_t assistant_turns = 0;
};
// The rollout settings of an engineer episode: `rc` (prompts, schemas) with room for a whole
// episode (16 turns, no token or wall cap), the final evaluation, no Bash, the tool limits' defaults.
v1::RolloutConfig EpisodeRolloutConfig(v1::RolloutConfig rc, const std::string& workspace_root);
absl::StatusOr<Corpus> MakeCorpus(const std::vector<v1::Task>& tasks, int per_task, v1::RolloutConfig rollout,
                                  const std::string& skill_text, const agent::EngineerPolicyOptions& options, uint64_t seed,
                                  const std::string& workspace_root);

}  // namespace kernelrl::codemodel

#endif  // KERNELRL_TOOLS_CODEMODEL_CORPUS_H_
