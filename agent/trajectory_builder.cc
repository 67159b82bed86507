#include "agent/trajectory_builder.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "agent/tokenizer/unicode.h"

namespace kernelrl::agent {

std::string NeutralizeSpecialTokens(const std::string& text) {
  return absl::StrReplaceAll(text, {{"<|", "<\u200b|"}});
}

TrajectoryBuilder::TrajectoryBuilder(const ChatFormat* with_tools, const ChatFormat* plain,
                                     const Tokenizer* tokenizer)
    : with_tools_(with_tools),
      plain_(plain),
      tokenizer_(tokenizer),
      generation_prompt_(plain->generation_prompt_ids()) {}

absl::Status TrajectoryBuilder::Start(const std::string& system, const std::string& user) {
  if (!history_.empty()) return absl::FailedPreconditionError("TrajectoryBuilder::Start called twice");
  v1::Turn sys;
  sys.set_role(v1::Turn::SYSTEM);
  sys.set_content(system);
  if (absl::Status s = Append(ChatTurn{ChatRole::kSystem, system, {}, std::nullopt}, *with_tools_, sys, nullptr);
      !s.ok()) {
    return s;
  }
  v1::Turn task;
  task.set_role(v1::Turn::USER);
  task.set_content(user);
  return Append(ChatTurn{ChatRole::kUser, user, {}, std::nullopt}, *plain_, task, nullptr);
}

std::vector<int32_t> TrajectoryBuilder::PromptIds() const {
  std::vector<int32_t> out;
  out.reserve(ids_.size() + generation_prompt_.size());
  out.insert(out.end(), ids_.begin(), ids_.end());
  out.insert(out.end(), generation_prompt_.begin(), generation_prompt_.end());
  return out;
}

absl::StatusOr<std::string> TrajectoryBuilder::AddAssistant(const SampledTurn& sample) {
  if (history_.empty()) return absl::FailedPreconditionError("AddAssistant before Start");
  if (sample.ids.empty()) return absl::InvalidArgumentError("the policy returned no tokens");
  if (sample.logprobs.size() != sample.ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the policy returned ", sample.ids.size(), " ids but ",
                                                   sample.logprobs.size(), " log-probs"));
  }
  std::vector<int32_t> body = sample.ids;
  if (body.back() == plain_->im_end_id()) body.pop_back();
  ChatTurn turn{ChatRole::kAssistant, tokenizer_->Decode(body), {}, sample.ids};
  v1::Turn proto;
  proto.set_role(v1::Turn::ASSISTANT);
  // Turn.content is a proto string (UTF-8): sampled ids can decode to invalid bytes (a reply cut inside
  // a character, a model from scratch); they show as U+FFFD there. The ids stay exactly what was sampled.
  std::string valid;
  for (const Codepoint& c : DecodeUtf8(turn.content)) AppendUtf8(c.cp, &valid);
  proto.set_content(valid);
  proto.set_policy_version(sample.policy_version);
  if (num_assistant_ == 0) {
    sampling_ = sample.sampling;
  } else if (sample.sampling.SerializeAsString() != sampling_.SerializeAsString()) {
    sampling_.set_policy("mixed");
  }
  std::string text = turn.content;
  if (absl::Status s = Append(turn, *plain_, std::move(proto), &sample.logprobs); !s.ok()) return s;
  ++num_assistant_;
  num_generated_ += static_cast<int64_t>(sample.ids.size());
  return text;
}

void TrajectoryBuilder::SetAssistantCall(const std::string& tool_name, const std::string& arguments_json) {
  for (auto it = turns_.rbegin(); it != turns_.rend(); ++it) {
    if (it->role() != v1::Turn::ASSISTANT) continue;
    it->set_tool_name(tool_name);
    it->set_tool_arguments_json(arguments_json);
    return;
  }
}

absl::Status TrajectoryBuilder::AddToolResult(const std::string& tool_name, const std::string& arguments_json,
                                              const std::string& content, const v1::Verdict* verdict) {
  if (history_.empty()) return absl::FailedPreconditionError("AddToolResult before Start");
  const std::string safe = NeutralizeSpecialTokens(content);
  v1::Turn proto;
  proto.set_role(v1::Turn::TOOL);
  proto.set_content(safe);
  proto.set_tool_name(tool_name);
  proto.set_tool_arguments_json(arguments_json);
  if (verdict != nullptr) *proto.mutable_verdict() = *verdict;
  return Append(ChatTurn{ChatRole::kTool, safe, {}, std::nullopt}, *plain_, std::move(proto), nullptr);
}

absl::Status TrajectoryBuilder::Append(const ChatTurn& turn, const ChatFormat& format, v1::Turn proto_turn,
                                       const std::vector<float>* logprobs) {
  absl::StatusOr<RenderedChat> r = format.Render({turn}, /*add_generation_prompt=*/false);
  if (!r.ok()) return r.status();
  if (r->turns.size() != 1 || r->prelude_end != 0) {
    return absl::InternalError("TrajectoryBuilder: a single turn rendered as more than one message");
  }
  const int32_t offset = static_cast<int32_t>(ids_.size());
  ids_.insert(ids_.end(), r->ids.begin(), r->ids.end());
  mask_.insert(mask_.end(), r->loss_mask.begin(), r->loss_mask.end());
  logprobs_.resize(ids_.size(), 0.0f);
  if (logprobs != nullptr) {
    size_t next = 0;
    for (size_t i = offset; i < ids_.size(); ++i) {
      if (mask_[i] == 0) continue;
      if (next == logprobs->size()) return absl::InternalError("more trained tokens than sampled log-probs");
      logprobs_[i] = (*logprobs)[next++];
    }
    if (next != logprobs->size()) {
      return absl::InternalError(absl::StrCat("assistant turn: ", logprobs->size(), " sampled tokens but ", next,
                                              " trained positions"));
    }
  }
  proto_turn.set_token_begin(offset + r->turns[0].token_begin);
  proto_turn.set_token_end(offset + r->turns[0].token_end);
  turns_.push_back(std::move(proto_turn));
  history_.push_back(turn);
  return absl::OkStatus();
}

v1::Trajectory TrajectoryBuilder::Build() const {
  v1::Trajectory t;
  int64_t oldest = -1;
  for (const v1::Turn& turn : turns_) {
    *t.add_turns() = turn;
    if (turn.role() == v1::Turn::ASSISTANT && (oldest < 0 || turn.policy_version() < oldest)) {
      oldest = turn.policy_version();
    }
  }
  t.set_policy_version(std::max<int64_t>(oldest, 0));
  if (num_assistant_ > 0) *t.mutable_sampling() = sampling_;
  t.mutable_token_ids()->Add(ids_.begin(), ids_.end());
  t.mutable_loss_mask()->Add(mask_.begin(), mask_.end());
  t.mutable_logprobs()->Add(logprobs_.begin(), logprobs_.end());
  t.mutable_stats()->set_num_turns(static_cast<int32_t>(turns_.size()));
  t.mutable_stats()->set_num_tokens(static_cast<int32_t>(ids_.size()));
  t.mutable_stats()->set_num_generated_tokens(static_cast<int32_t>(num_generated_));
  return t;
}

}  // namespace kernelrl::agent
