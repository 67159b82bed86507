#include "agent/policy/scripted_policy.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "agent/chat/tool_calls.h"
#include "common/file.h"

namespace kernelrl::agent {
namespace {

Json Args(std::vector<std::pair<std::string, Json>> members) {
  Json args = Json::object();
  for (auto& [key, value] : members) args[key] = std::move(value);
  return args;
}

}  // namespace

ScriptedPolicy::ScriptedPolicy(std::string solutions_dir, int64_t policy_version, const Tokenizer* tokenizer,
                               int32_t im_end_id)
    : dir_(std::move(solutions_dir)), version_(policy_version), tokenizer_(tokenizer), im_end_id_(im_end_id) {}

absl::StatusOr<std::string> ScriptedPolicy::ReplyText(const std::string& task_id, int turn) const {
  namespace fs = std::filesystem;
  std::string solution = dir_ + "/" + task_id;
  std::error_code ec;
  if (!fs::is_directory(solution, ec)) solution = dir_ + "/" + task_id.substr(task_id.rfind('/') + 1);
  if (!fs::is_directory(solution, ec)) {
    return std::string("I have no solution for this task; submitting without one.");
  }
  switch (turn) {
    case 0:
      return absl::StrCat("I'll read the reference model first.\n",
                          agent::FormatToolCall("Read", Args({{"path", Json("model.py")}})));
    case 1: {
      std::vector<std::string> files;
      for (auto it = fs::recursive_directory_iterator(solution, ec); !ec && it != fs::recursive_directory_iterator();
           it.increment(ec)) {
        if (it->is_regular_file()) files.push_back(it->path().lexically_relative(solution).string());
      }
      std::sort(files.begin(), files.end());
      std::string text = "Writing the kernel and ModelNew.";
      for (const std::string& f : files) {
        absl::StatusOr<std::string> content = ReadFileToString(solution + "/" + f);
        if (!content.ok()) return content.status();
        absl::StrAppend(&text, "\n",
                        agent::FormatToolCall("Write", Args({{"path", Json(f)},
                                                             {"content", Json(*content)}})));
      }
      return text;
    }
    case 2:
      return absl::StrCat("Compiling.\n", agent::FormatToolCall("Compile", Json::object()));
    case 3:
      return absl::StrCat("Checking correctness.\n", agent::FormatToolCall("Verify", Json::object()));
    case 4:
      return absl::StrCat("Timing it.\n", agent::FormatToolCall("Profile", Json::object()));
    default:
      return std::string("The kernel is correct and profiled; done.");
  }
}

absl::StatusOr<PolicyResponse> ScriptedPolicy::Generate(const PolicyRequest& request) {
  absl::StatusOr<std::string> text = ReplyText(request.task_id, request.turn);
  if (!text.ok()) return text.status();
  PolicyResponse r;
  r.ids = tokenizer_->Encode(*text);
  if (request.max_new_tokens > 0 && static_cast<int32_t>(r.ids.size()) >= request.max_new_tokens) {
    r.ids.resize(static_cast<size_t>(request.max_new_tokens));
    r.finish_reason = "length";
  } else {
    r.ids.push_back(im_end_id_);
    r.finish_reason = "stop";
  }
  r.logprobs.resize(r.ids.size());
  for (size_t i = 0; i < r.ids.size(); ++i) r.logprobs[i] = -0.01f * static_cast<float>(1 + (i + request.turn) % 7);
  r.policy_version = version_;
  r.sampling.set_policy("scripted");  // Its log-probs are placeholders, not a model's.
  return r;
}

}  // namespace kernelrl::agent
