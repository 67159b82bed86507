#include "agent/policy/choice_policy.h"

#include <cmath>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "agent/chat/tool_calls.h"
#include "common/json.h"

namespace kernelrl::agent {
namespace {

// Digits 0-5: uniform over both 2- and 3-option slots (6 is a multiple of each).
constexpr int kDigits = 6;

}  // namespace

ChoicePolicy::ChoicePolicy(std::unique_ptr<PolicyClient> inner, const Tokenizer* tokenizer,
                           int32_t im_end_id, std::string device, int64_t random_policy_version)
    : inner_(std::move(inner)),
      tokenizer_(tokenizer),
      im_end_id_(im_end_id),
      device_(std::move(device)),
      random_version_(random_policy_version) {}

bool ChoicePolicy::ReplyChoice(const std::string& reply, const std::vector<family::Slot>& slots, family::Choice* choice) {
  std::string chars;
  for (char c : reply) {
    if (!absl::ascii_isspace(static_cast<unsigned char>(c))) chars += c;
    if (chars.size() == family::kNumSlots) break;
  }
  if (chars.empty() || chars[0] == '.') return false;
  for (int i = 0; i < family::kNumSlots; ++i) {
    const int code = i < static_cast<int>(chars.size()) ? static_cast<unsigned char>(chars[i]) : '0';
    (*choice)[i] = code % static_cast<int>(slots[i].options.size());
  }
  return true;
}

std::string ChoicePolicy::RandomReply(int turn, uint64_t seed) const {
  std::mt19937_64 rng(seed);
  if (turn > 0 && (turn > 1 || rng() % 3 != 0)) return ".";
  std::string digits;
  for (int i = 0; i < family::kNumSlots; ++i) digits += static_cast<char>('0' + rng() % kDigits);
  return digits;
}

absl::StatusOr<PolicyResponse> ChoicePolicy::Generate(const PolicyRequest& request) {
  if (inner_ != nullptr) {
    PolicyRequest r = request;
    // kNumSlots characters and the end of turn are all a reply needs.
    r.max_new_tokens = std::min<int32_t>(request.max_new_tokens > 0 ? request.max_new_tokens : 16, 16);
    return inner_->Generate(r);
  }
  uint64_t seed = request.seed;
  if (seed == 0) {
    absl::MutexLock lock(&mu_);
    seed = std::random_device{}() ^ (++draws_ * 0x9E3779B97F4A7C15ull);
  }
  const std::string text = RandomReply(request.turn, seed);
  PolicyResponse out;
  out.ids = tokenizer_->Encode(text);
  // The draw's own probability: 1/kDigits per digit (a digit is one id in the Qwen2-style
  // tokenizers); the closing "." of a candidate-free turn is scripted (log-prob 0).
  out.logprobs.assign(out.ids.size(), 0.f);
  for (size_t i = 0; i < out.ids.size(); ++i) {
    const std::string piece = tokenizer_->Decode({out.ids[i]}, /*skip_special=*/false);
    if (piece.size() == 1 && piece[0] >= '0' && piece[0] < '0' + kDigits) {
      out.logprobs[i] = -static_cast<float>(std::log(kDigits));
    }
  }
  out.ids.push_back(im_end_id_);
  out.logprobs.push_back(0.f);
  out.policy_version = random_version_;
  out.finish_reason = "stop";
  return out;
}

absl::StatusOr<std::vector<ToolCall>> ChoicePolicy::ToolCalls(const v1::Task& task,
                                                                      const std::string& reply) const {
  auto spec = family::ParseTaskSpec(task.reference_source());
  if (!spec.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("task ", task.id(), " is not a family task: ", spec.status().message()));
  }
  auto slots = family::Slots(spec->family);
  if (!slots.ok()) return slots.status();
  family::Choice choice{};
  if (!ReplyChoice(reply, *slots, &choice)) return std::vector<ToolCall>{};
  const std::string device = !device_.empty()                    ? device_
                             : task.inputs().device() == "cpu" ? "cpu"
                                                               : "cuda";
  auto files = family::Render(*spec, choice, device);
  if (!files.ok()) return files.status();
  std::vector<ToolCall> calls;
  auto add = [&](const std::string& name, Json args) {
    ToolCall c;
    c.name = name;
    c.arguments_json = agent::PythonJsonDumps(args);
    c.arguments = std::move(args);
    calls.push_back(std::move(c));
  };
  // Kernel first, then model_new.py (std::map orders "kernels/" before "model_new.py").
  for (const auto& [path, content] : *files) {
    add("Write", Json::object({{"path", Json(path)}, {"content", Json(content)}}));
  }
  add("Profile", Json::object());
  return calls;
}

}  // namespace kernelrl::agent
