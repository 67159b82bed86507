#include "tools/codemodel/op_probe.h"

#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "agent/family/templates.h"

namespace kernelrl::codemodel {
namespace {

namespace fam = agent::family;

void Count(OpProbeCount* c, bool right, double logprob) {
  c->right += right ? 1 : 0;
  ++c->total;
  c->logprob += logprob;
}

// Where `text` names `spec`'s ops (OpMentions).
std::vector<OpMention> Mentions(const std::string& text, const fam::TaskSpec& spec) {
  std::vector<OpMention> out;
  // A chain "a -> b" after "F: " (or, as templates wrote it before, in "F (...)"): the first op
  // and the later ones.
  auto chain = [&](const std::regex& re, const std::string& place) {
    for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
      const int g = (*it)[1].matched ? 1 : 2;
      size_t at = static_cast<size_t>(it->position(g));
      bool first = true;
      for (absl::string_view op : absl::StrSplit(it->str(g), " -> ")) {
        out.push_back({absl::StrCat(place, first ? "_first" : "_later"), at});
        at += op.size() + 4;
        first = false;
      }
    }
  };
  static const std::regex summary(R"(The task is \w+(?: \(([^)]*)\)|: ([^.]*)\.))");
  static const std::regex header(R"(family template[^:\n]*: \w+(?: \(([^)]*)\)|: ([^;]*);))");
  chain(summary, "summary");
  chain(header, "header");
  // "// op" alone on a line of a kernel inside a tool call's JSON string ("\n" escaped).
  static const std::regex comment(R"(\\n *// ([a-z_0-9]+)\\n)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), comment); it != std::sregex_iterator(); ++it) {
    if (std::find(spec.ops.begin(), spec.ops.end(), it->str(1)) == spec.ops.end()) continue;
    out.push_back({"comment", static_cast<size_t>(it->position(1))});
    // The expression: the next line, from its first non-blank to its escaped newline.
    const size_t line = static_cast<size_t>(it->position(0) + it->length(0));
    const size_t begin = text.find_first_not_of(' ', line), end = text.find("\\n", line);
    if (begin != std::string::npos && end != std::string::npos && begin < end) {
      out.push_back({"expression", begin, end, it->str(1)});
    }
  }
  // The reply after a Profile ("Reward 2: 1.31x eager, 0.87x compile. Trying ..." or "... Done."):
  // the reward and both figures copied from the verdict, and the decision that follows them.
  static const std::regex verdict(R"(Reward ([0-9]+: [0-9.]+x eager, [0-9.]+x compile)\. (Done|Trying))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), verdict); it != std::sregex_iterator(); ++it) {
    const size_t at = static_cast<size_t>(it->position(1));
    out.push_back({"verdict_reward", at, at + 1});
    out.push_back({"verdict_figures", at, at + static_cast<size_t>(it->length(1))});
    out.push_back({"verdict_decision", static_cast<size_t>(it->position(2)),
                   static_cast<size_t>(it->position(2) + it->length(2))});
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<OpMention>> OpMentions(const std::string& text) {
  auto spec = fam::FindTaskSpec(text);
  if (!spec.ok()) return spec.status();
  return Mentions(text, *spec);
}

namespace {

// The token that holds character `offset`, `start` being each token's first character.
size_t TokenAt(const std::vector<size_t>& start, size_t offset) {
  return static_cast<size_t>(std::upper_bound(start.begin(), start.end(), offset) - start.begin()) - 1;
}

// Adds to (*by_task)[task_id] (by slot; an entry only for a slot found) the model's odds for each
// of `family`'s design slots at the first place where the model's own tokens name the slot
// ("strategy=" then the option). Each option's text, from the start of the token that holds the
// written option's first character, is scored after the tokens before that one; the options of a
// slot go through the model together. An option that begins another (elementwise work 4 and 4c)
// is scored as its own text, whatever follows it.
absl::Status AddDesignOdds(const learner::Transformer& model, const agent::Tokenizer& tokenizer,
                           const std::vector<int32_t>& ids, const std::vector<int32_t>& loss_mask,
                           const std::string& text, const std::vector<size_t>& start, const std::string& family,
                           std::map<std::string, std::map<std::string, DesignOdds>>* by_task, const std::string& task_id) {
  auto slots = fam::Slots(family);
  if (!slots.ok()) return slots.status();
  for (const fam::Slot& slot : *slots) {
    const std::string key = slot.name + "=";
    size_t t = 0, value = std::string::npos;
    for (size_t q = text.find(key); q != std::string::npos; q = text.find(key, q + 1)) {
      const size_t p = q + key.size();
      if ((q > 0 && (std::isalnum(static_cast<unsigned char>(text[q - 1])) || text[q - 1] == '_')) || p >= text.size()) {
        continue;  // "myblock=" names no slot.
      }
      if (const size_t k = TokenAt(start, p); k > 0 && loss_mask[k] == 1) {
        t = k, value = p;
        break;
      }
    }
    if (value == std::string::npos) continue;
    const std::string before = text.substr(start[t], value - start[t]);  // "=" when it opens the token
    std::vector<std::vector<int32_t>> options;
    size_t longest = 0;
    for (const std::string& option : slot.options) {
      options.push_back(tokenizer.Encode(before + option));
      longest = std::max(longest, options.back().size());
    }
    // One row an option: the prefix, the option's tokens, then padding (causal: read by nothing scored).
    std::vector<int64_t> rows;
    for (const std::vector<int32_t>& o : options) {
      rows.insert(rows.end(), ids.begin(), ids.begin() + static_cast<int64_t>(t));
      rows.insert(rows.end(), o.begin(), o.end());
      rows.insert(rows.end(), longest - o.size(), 0);
    }
    const int64_t width = static_cast<int64_t>(t + longest);
    const at::Tensor input = torch::tensor(rows, torch::kInt64).view({static_cast<int64_t>(options.size()), width});
    // Only the positions that predict an option's tokens: logp[i][j] predicts option i's token j.
    const at::Tensor logp = model.Logits(input.to(model.options().device))
                                .narrow(1, static_cast<int64_t>(t) - 1, static_cast<int64_t>(longest))
                                .to(torch::kFloat)
                                .log_softmax(-1)
                                .to(torch::kCPU);
    std::vector<double> score(options.size(), 0.0);
    for (size_t i = 0; i < options.size(); ++i) {
      for (size_t j = 0; j < options[i].size(); ++j) score[i] += logp[i][j][options[i][j]].item<double>();
    }
    const double top = *std::max_element(score.begin(), score.end());
    double sum = 0;
    for (double s : score) sum += std::exp(s - top);
    DesignOdds& d = (*by_task)[task_id][slot.name];
    for (size_t i = 0; i < options.size(); ++i) d.probability[slot.options[i]] += std::exp(score[i] - top) / sum;
    ++d.n;
  }
  return absl::OkStatus();
}

// Probes one token sequence (`loss_mask` 1: the model's own tokens) at every place its text names
// its task's ops, adding to `result`; with `divergence`, also where the model's most likely next
// token first differs from the sequence's own among the model's tokens.
absl::Status ProbeSequence(const learner::Transformer& model, const agent::Tokenizer& tokenizer,
                           const std::vector<int32_t>& ids, const std::vector<int32_t>& loss_mask,
                           const std::string& task_id, const std::string* expected_text, OpProbeResult* result,
                           Divergence* divergence) {
  if (ids.size() < 2 || loss_mask.size() != ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat(ids.size(), " tokens and ", loss_mask.size(), " loss-mask entries"));
  }
  // Each token's first character in the text: the tokens decoded one by one, back to back.
  std::vector<size_t> start;
  std::string text;
  for (int32_t id : ids) {
    start.push_back(text.size());
    text += tokenizer.Decode({id});
  }
  if (expected_text != nullptr && text != *expected_text) {
    return absl::InternalError(absl::StrCat("record ", result->records, ": its tokens decoded one by one do not give its text"));
  }
  auto spec = fam::FindTaskSpec(text);  // model.py's header, as the Read tool showed it.
  if (!spec.ok()) return spec.status();
  at::Tensor input = torch::tensor(std::vector<int64_t>(ids.begin(), ids.end()), torch::kInt64)
                         .unsqueeze(0)
                         .to(model.options().device);
  const at::Tensor logits = model.Logits(input).squeeze(0).to(torch::kFloat);
  at::Tensor predicted = logits.argmax(-1).to(torch::kCPU);
  const int64_t* next = predicted.data_ptr<int64_t>();
  // logp[k - 1]: the log-probability of token k given those before it.
  const at::Tensor log_softmax = logits.log_softmax(-1);
  at::Tensor logp_t = log_softmax.slice(0, 0, static_cast<int64_t>(ids.size()) - 1)
                          .gather(1, input.squeeze(0).slice(0, 1).unsqueeze(1))
                          .squeeze(1)
                          .to(torch::kCPU)
                          .to(torch::kDouble)
                          .contiguous();
  const double* logp = logp_t.data_ptr<double>();
  const std::string composition = absl::StrCat(spec->family, ": ", absl::StrJoin(spec->ops, " -> "));
  for (const OpMention& m : Mentions(text, *spec)) {
    // The token that holds the place's first character, predicted from the one before it, and
    // for a line every token to its last character.
    const size_t t = TokenAt(start, m.offset), last = m.end > m.offset ? TokenAt(start, m.end - 1) : t;
    if (t == 0 || loss_mask[t] != 1) continue;  // Only the model's own tokens.
    bool right = true;
    double lp = 0;
    for (size_t k = t; k <= last; ++k) {
      right = right && next[k - 1] == ids[k];
      lp += logp[k - 1];
    }
    Count(&result->by_place[m.place], right, lp);
    Count(&result->by_family[spec->family], right, lp);
    if (!absl::StartsWith(m.place, "verdict_")) Count(&result->by_composition[composition], right, lp);
    if (!m.op.empty()) Count(&result->expression_by_op[m.op], right, lp);
  }
  if (auto s = AddDesignOdds(model, tokenizer, ids, loss_mask, text, start, spec->family, &result->design_odds, task_id);
      !s.ok()) {
    return s;
  }
  ++result->records;
  if (divergence != nullptr) {
    *divergence = Divergence{};
    for (size_t k = 1; k < ids.size(); ++k) {
      if (loss_mask[k] != 1) continue;
      ++divergence->model_tokens;
      if (divergence->token >= 0 || next[k - 1] == ids[k]) continue;
      divergence->token = static_cast<int64_t>(k);
      divergence->model_token = divergence->model_tokens - 1;
      divergence->written = tokenizer.Decode({ids[k]});
      divergence->predicted = tokenizer.Decode({static_cast<int32_t>(next[k - 1])});
      divergence->margin = log_softmax[k - 1][next[k - 1]].item<double>() - logp[k - 1];
      const size_t from = start[k] > 120 ? start[k] - 120 : 0;
      divergence->before = text.substr(from, start[k] - from);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ProbeOpNames(const learner::Transformer& model, const agent::Tokenizer& tokenizer,
                          const std::vector<Json>& records, OpProbeResult* result) {
  auto formats = RecordFormats::Create(&tokenizer);
  if (!formats.ok()) return formats.status();
  torch::NoGradGuard no_grad;
  for (const Json& record : records) {
    auto rendered = RenderRecord(record, *formats);
    if (!rendered.ok()) return rendered.status();
    const Json* task = FindJson(record, "task_id");
    const std::string task_id = task != nullptr && task->is_string() ? task->get<std::string>() : "";
    if (auto s = ProbeSequence(model, tokenizer, rendered->ids, rendered->loss_mask, task_id, &rendered->text, result,
                               nullptr);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TrajectoryProbe> ProbeTrajectory(const learner::Transformer& model, const agent::Tokenizer& tokenizer,
                                                const v1::Trajectory& trajectory) {
  torch::NoGradGuard no_grad;
  TrajectoryProbe probe;
  const std::vector<int32_t> ids(trajectory.token_ids().begin(), trajectory.token_ids().end());
  const std::vector<int32_t> mask(trajectory.loss_mask().begin(), trajectory.loss_mask().end());
  if (auto s = ProbeSequence(model, tokenizer, ids, mask, trajectory.task_id(), nullptr, &probe.places,
                             &probe.divergence);
      !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(trajectory.id(), ": ", s.message()));
  }
  return probe;
}

Json OpProbeJson(const OpProbeResult& result) {
  auto counts = [](const std::map<std::string, OpProbeCount>& m) {
    Json out = Json::object();
    for (const auto& [k, c] : m) {
      out[k] = Json::object({{"right", Json(c.right)},
                             {"total", Json(c.total)},
                             {"rate", Json(c.total > 0 ? static_cast<double>(c.right) / c.total : 0.0)},
                             {"mean_logprob", Json(c.total > 0 ? c.logprob / c.total : 0.0)}});
    }
    return out;
  };
  Json design = Json::object();
  for (const auto& [task, slots] : result.design_odds) {
    Json by_slot = Json::object();
    for (const auto& [slot, d] : slots) {
      Json p = Json::object();
      for (const auto& [option, sum] : d.probability) p[option] = d.n > 0 ? sum / d.n : 0.0;
      by_slot[slot] = Json::object({{"n", Json(d.n)}, {"probability", std::move(p)}});
    }
    design[task] = std::move(by_slot);
  }
  return Json::object({{"records", Json(result.records)},
                       {"by_place", counts(result.by_place)},
                       {"by_family", counts(result.by_family)},
                       {"by_composition", counts(result.by_composition)},
                       {"expression_by_op", counts(result.expression_by_op)},
                       {"design_odds", std::move(design)}});
}

}  // namespace kernelrl::codemodel
