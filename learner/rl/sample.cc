#include "learner/rl/sample.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace kernelrl::learner::rl {

int64_t Sample::model_tokens() const { return std::count(loss_mask.begin(), loss_mask.end(), uint8_t{1}); }

absl::StatusOr<Sample> SampleFromTrajectory(const v1::Trajectory& t, int64_t vocab_size, int64_t max_tokens) {
  auto bad = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("trajectory ", t.id(), ": ", parts...));
  };
  const int n = t.token_ids_size();
  if (n == 0) return bad("no tokens");
  if (t.loss_mask_size() != n) return bad("loss_mask has ", t.loss_mask_size(), " entries for ", n, " tokens");
  if (t.logprobs_size() != n) return bad("logprobs has ", t.logprobs_size(), " entries for ", n, " tokens");
  if (max_tokens > 0 && n > max_tokens) return bad(n, " tokens, more than max_trajectory_tokens ", max_tokens);
  if (!std::isfinite(t.reward())) return bad("reward is not finite");
  Sample s;
  s.id = t.id();
  s.task_id = t.task_id();
  s.reward = t.reward();
  s.policy_version = t.policy_version();
  const std::string& stop = t.stats().stop_reason();
  s.length_clipped = stop == "max_tokens" || stop == "max_turns";
  s.ids.assign(t.token_ids().begin(), t.token_ids().end());
  s.loss_mask.resize(n);
  s.rollout_logprobs.assign(t.logprobs().begin(), t.logprobs().end());
  int64_t model = 0;
  for (int i = 0; i < n; ++i) {
    const int32_t id = s.ids[i];
    if (id < 0 || (vocab_size > 0 && id >= vocab_size)) return bad("token ", i, " id ", id, " outside the vocabulary");
    const int32_t m = t.loss_mask(i);
    if (m != 0 && m != 1) return bad("loss_mask[", i, "] = ", m, " (must be 0 or 1)");
    s.loss_mask[i] = static_cast<uint8_t>(m);
    const float lp = s.rollout_logprobs[i];
    if (m == 1) {
      if (i == 0) return bad("token 0 is a model token (nothing predicts it)");
      if (!std::isfinite(lp) || lp > 0) return bad("logprobs[", i, "] = ", lp, " is not a log-probability");
      ++model;
    }
  }
  if (model == 0) return bad("no model tokens (loss_mask all 0)");
  return s;
}

void SetTaskBaselines(std::vector<Sample>* batch) {
  std::map<std::string, std::pair<double, int>> by_task;  // Sum and count of rewards.
  double sum = 0;
  for (const Sample& s : *batch) {
    sum += s.reward;
    if (!s.task_id.empty()) {
      auto& [task_sum, count] = by_task[s.task_id];
      task_sum += s.reward, count += 1;
    }
  }
  const int n = static_cast<int>(batch->size());
  for (Sample& s : *batch) {
    const auto it = s.task_id.empty() ? by_task.end() : by_task.find(s.task_id);
    if (it != by_task.end() && it->second.second > 1) {
      s.baseline = (it->second.first - s.reward) / (it->second.second - 1);
    } else {
      s.baseline = n > 1 ? (sum - s.reward) / (n - 1) : 0.0;
    }
  }
}

double TaskMeansExplainedVariance(const std::vector<Sample>& batch) {
  std::map<std::string, std::pair<double, double>> by_task;  // Token-weighted reward sum, tokens.
  double sum = 0, tokens = 0;
  for (const Sample& s : batch) {
    const double t = static_cast<double>(s.model_tokens());
    auto& [task_sum, task_tokens] = by_task[s.task_id];
    task_sum += t * s.reward, task_tokens += t, sum += t * s.reward, tokens += t;
  }
  if (tokens <= 0) return 0;
  double total = 0, within = 0;
  for (const Sample& s : batch) {
    const double t = static_cast<double>(s.model_tokens());
    const auto& [task_sum, task_tokens] = by_task[s.task_id];
    total += t * (s.reward - sum / tokens) * (s.reward - sum / tokens);
    within += t * (s.reward - task_sum / task_tokens) * (s.reward - task_sum / task_tokens);
  }
  return total <= 1e-12 * tokens ? 0.0 : 1.0 - within / total;
}

std::vector<PackedRow> PackRows(const std::vector<Sample>& samples, int64_t max_tokens_per_row) {
  std::vector<int> order(samples.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return samples[a].ids.size() > samples[b].ids.size(); });
  std::vector<PackedRow> rows;
  for (int i : order) {
    const int64_t n = samples[i].ids.size();
    PackedRow* fit = nullptr;
    for (PackedRow& r : rows) {
      if (r.tokens + n <= max_tokens_per_row) {
        fit = &r;
        break;
      }
    }
    if (fit == nullptr) fit = &rows.emplace_back();
    fit->samples.push_back(i);
    fit->lengths.push_back(n);
    fit->tokens += n;
  }
  return rows;
}

}  // namespace kernelrl::learner::rl
