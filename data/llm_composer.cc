#include "data/llm_composer.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "data/rng.h"

namespace kernelrl {
namespace {

// A call of `symbol` at `pos`: not the tail of a longer name, followed by '('.
bool IsCallAt(const std::string& src, size_t pos, const std::string& symbol) {
  if (pos > 0) {
    const char c = src[pos - 1];
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.') return false;
  }
  size_t end = pos + symbol.size();
  while (end < src.size() && src[end] == ' ') ++end;
  return end < src.size() && src[end] == '(';
}

// The first fenced block (```python or ```), else the whole answer.
std::string ExtractCode(const std::string& answer) {
  const size_t open = answer.find("```");
  if (open == std::string::npos) return answer;
  const size_t line_end = answer.find('\n', open);
  if (line_end == std::string::npos) return "";
  const size_t close = answer.find("```", line_end);
  return answer.substr(line_end + 1, close == std::string::npos ? std::string::npos : close - line_end - 1);
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlmComposer>> LlmComposer::Create(const Composer* rules,
                                                                 std::unique_ptr<agent::PolicyClient> policy,
                                                                 std::unique_ptr<agent::Tokenizer> tokenizer,
                                                                 LlmComposerConfig config, uint64_t seed,
                                                                 std::string id_prefix) {
  if (rules == nullptr || policy == nullptr || tokenizer == nullptr) {
    return absl::InvalidArgumentError("LlmComposer: rules, policy and tokenizer are required");
  }
  auto format = agent::ChatFormat::Create(tokenizer.get(), Json::array());
  if (!format.ok()) return format.status();
  if (config.max_new_tokens() <= 0) config.set_max_new_tokens(2048);
  if (config.temperature() <= 0) config.set_temperature(0.7);
  return std::unique_ptr<LlmComposer>(new LlmComposer(rules, std::move(policy), std::move(tokenizer),
                                                      std::move(*format), std::move(config), seed,
                                                      std::move(id_prefix)));
}

LlmComposer::LlmComposer(const Composer* rules, std::unique_ptr<agent::PolicyClient> policy,
                         std::unique_ptr<agent::Tokenizer> tokenizer, agent::ChatFormat format,
                         LlmComposerConfig config, uint64_t seed, std::string id_prefix)
    : rules_(rules),
      policy_(std::move(policy)),
      tokenizer_(std::move(tokenizer)),
      format_(std::move(format)),
      config_(std::move(config)),
      seed_(seed),
      id_prefix_(std::move(id_prefix)) {}

std::string LlmComposer::Prompt(int count) const {
  std::string ops;
  for (const auto& op : rules_->catalogue().ops()) {
    absl::StrAppend(&ops, "- ", op.symbol(), op.module() ? " (module, build it in __init__)" : "",
                    op.args().empty() ? "" : absl::StrCat(" extra arguments like: ", op.args()), "\n");
  }
  return absl::StrCat(
      "Write a PyTorch program in the KernelBench format that stacks exactly ", count,
      " operator", count == 1 ? "" : "s", " from this list, each applied to the previous one's output:\n", ops,
      "\nThe program must import torch, torch.nn as nn and torch.nn.functional as F; define "
      "`class Model(nn.Module)` with `__init__` and `forward`; `def get_inputs()` returning a list of input "
      "tensors (torch.randn, batch first); `def get_init_inputs()` returning the constructor's arguments as a "
      "list. It must be deterministic in eval mode and its output must depend on the input. Answer with one "
      "```python code block and nothing else.");
}

absl::StatusOr<ComposedTask> LlmComposer::ParseAnswer(int64_t index, const std::string& answer) const {
  const std::string code = std::string(absl::StripAsciiWhitespace(ExtractCode(answer)));
  for (const char* needed : {"class Model(", "def forward(", "def get_inputs(", "def get_init_inputs("}) {
    if (!absl::StrContains(code, needed)) {
      return absl::InvalidArgumentError(absl::StrCat("answer is not a KernelBench program: no `", needed, "`"));
    }
  }
  // Catalogue operators called, in source order (a longer symbol wins at one position).
  std::vector<std::pair<size_t, std::string>> calls;
  for (size_t pos = 0; pos < code.size(); ++pos) {
    const v1::OpSpec* best = nullptr;
    for (const auto& op : rules_->catalogue().ops()) {
      if (op.symbol().empty() || code.compare(pos, op.symbol().size(), op.symbol()) != 0) continue;
      if (!IsCallAt(code, pos, op.symbol())) continue;
      if (best == nullptr || op.symbol().size() > best->symbol().size()) best = &op;
    }
    if (best != nullptr) calls.emplace_back(pos, best->name());
  }
  if (calls.empty() || calls.size() > 5) {
    return absl::InvalidArgumentError(
        absl::StrCat("answer calls ", calls.size(), " catalogue operators, want 1 to 5"));
  }
  ComposedTask t;
  t.index = index;
  t.composer = "llm";
  t.source = code + "\n";
  std::vector<std::string> short_names;
  for (const auto& [pos, name] : calls) {
    t.operators.push_back(name);
    short_names.push_back(ShortName(name));
  }
  t.id = absl::StrCat(id_prefix_, index, "_llm_", absl::StrJoin(short_names, "_"));
  return t;
}

absl::StatusOr<ComposedTask> LlmComposer::Compose(int64_t index) const {
  Rng rng(seed_, static_cast<uint64_t>(index));
  const int count = rules_->DrawOperatorCount(&rng);
  if (count == 0) return rules_->Compose(index);  // Standalone transformers modules stay rule-built.
  std::vector<agent::ChatTurn> turns(2);
  turns[0].role = agent::ChatRole::kSystem;
  turns[0].content = "You write small, correct PyTorch programs.";
  turns[1].role = agent::ChatRole::kUser;
  turns[1].content = Prompt(count);
  auto rendered = format_.Render(turns, /*add_generation_prompt=*/true);
  if (!rendered.ok()) return rendered.status();
  agent::PolicyRequest req;
  req.prompt_ids = rendered->ids;
  req.max_new_tokens = config_.max_new_tokens();
  req.temperature = static_cast<float>(config_.temperature());
  req.stop_ids = {format_.im_end_id()};
  req.seed = rng.Next();
  req.request_id = absl::StrCat("data_synth-", seed_, "-", index);
  req.task_id = absl::StrCat(id_prefix_, index);
  req.history = &turns;
  auto reply = policy_->Generate(req);
  if (!reply.ok()) return absl::UnavailableError(absl::StrCat("policy: ", reply.status().message()));
  return ParseAnswer(index, tokenizer_->Decode(reply->ids, /*skip_special=*/true));
}

}  // namespace kernelrl
