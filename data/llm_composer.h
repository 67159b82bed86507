// The optional LLM composer (DataConfig.composer = "llm"):
// candidate i asks a policy backend — the agent's PolicyClient, so vLLM, the
// learner's built-in /v1/chat/completions server, a hosted API or gRPC — for
// a KernelBench-format program stacking the number of catalogue operators the
// rule sampler would draw for i (Composer::DrawOperatorCount, so the Table-3
// mix does not depend on the composer; a draw of "transformers" stays with the
// rule composer, which builds standalone modules).
//
// The LLM decides nothing: its answer is only parsed into a ComposedTask
// (composer "llm") and then goes through the same dedup, decontamination,
// execution filters and timing as a rule-based task. An answer that cannot
// be a task (no code, no Model/get_inputs/get_init_inputs, not 1-5 catalogue
// operators) or a failed request is an error the pipeline records as the
// candidate's "llm" verdict with the reason; a syntax error is caught by the
// pipeline's AST step ("llm" verdict too). Never a crash.
//
// Thread-safety: Compose may run on many threads (PolicyClient is thread-safe).
#ifndef KERNELRL_DATA_LLM_COMPOSER_H_
#define KERNELRL_DATA_LLM_COMPOSER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/policy/policy.h"
#include "agent/chat/chat_format.h"
#include "agent/tokenizer/tokenizer.h"
#include "data/composer.h"
#include "data/data.pb.h"

namespace kernelrl {

using ::kernelrl::v1::LlmComposerConfig;

class LlmComposer {
 public:
  // `rules` (the run's rule composer) must outlive this; the policy and
  // tokenizer are owned. Fails when the tokenizer has no ChatML tokens.
  static absl::StatusOr<std::unique_ptr<LlmComposer>> Create(const Composer* rules,
                                                             std::unique_ptr<agent::PolicyClient> policy,
                                                             std::unique_ptr<agent::Tokenizer> tokenizer,
                                                             LlmComposerConfig config, uint64_t seed,
                                                             std::string id_prefix);

  absl::StatusOr<ComposedTask> Compose(int64_t index) const;

  // The pieces, exposed for tests.
  std::string Prompt(int count) const;
  // The program in `answer` (the first ```python block, else the whole text)
  // as candidate `index`, with the catalogue operators it calls in order.
  absl::StatusOr<ComposedTask> ParseAnswer(int64_t index, const std::string& answer) const;

 private:
  LlmComposer(const Composer* rules, std::unique_ptr<agent::PolicyClient> policy,
              std::unique_ptr<agent::Tokenizer> tokenizer, agent::ChatFormat format, LlmComposerConfig config,
              uint64_t seed, std::string id_prefix);

  const Composer* const rules_;
  const std::unique_ptr<agent::PolicyClient> policy_;
  const std::unique_ptr<agent::Tokenizer> tokenizer_;
  const agent::ChatFormat format_;
  const LlmComposerConfig config_;
  const uint64_t seed_;
  const std::string id_prefix_;
};

}  // namespace kernelrl

#endif  // KERNELRL_DATA_LLM_COMPOSER_H_
