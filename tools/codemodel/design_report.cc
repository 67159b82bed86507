#include "tools/codemodel/design_report.h"

#include <algorithm>
#include <functional>
#include <map>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "agent/chat/tool_calls.h"
#include "agent/family/templates.h"
#include "tools/codemodel/corpus.h"

namespace kernelrl::codemodel {
namespace {

std::string Str(const Json& args, const char* key) {
  const Json* v = FindJson(args, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : "";
}

// A shell-quoted word's text ('...' or a bare word).
std::string Unquote(const std::string& word) {
  return word.size() >= 2 && word.front() == '\'' && word.back() == '\'' ? word.substr(1, word.size() - 2) : word;
}

// Replays a Bash command of the shapes the engineer writes (shell_changes): `cp SRC DST` and
// `sed -i -e 's/RE/TEXT/' ... FILE`, joined by &&, each RE read as ECMAScript (the engineer's
// `^`, `.*` and literals read the same as in sed). Anything else changed nothing we can follow.
void ReplayBash(const std::string& command, std::map<std::string, std::string>* files) {
  static const std::regex kCp(R"(^\s*cp\s+(\S+)\s+(\S+)\s*$)");
  static const std::regex kSed(R"(^\s*sed\s+-i((?:\s+-e\s+'s/[^'/]*/[^'/]*/')+)\s+(\S+)\s*$)");
  static const std::regex kExpr(R"('s/([^'/]*)/([^'/]*)/')");
  for (const absl::string_view part : absl::StrSplit(command, "&&")) {
    const std::string step(part);
    std::smatch m;
    if (std::regex_match(step, m, kCp)) {
      if (auto it = files->find(Unquote(m[1])); it != files->end()) (*files)[Unquote(m[2])] = it->second;
    } else if (std::regex_match(step, m, kSed)) {
      auto it = files->find(Unquote(m[2]));
      if (it == files->end()) continue;
      const std::string exprs = m[1];
      std::vector<std::string> lines = absl::StrSplit(it->second, '\n');
      for (std::sregex_iterator e(exprs.begin(), exprs.end(), kExpr), end; e != end; ++e) {
        try {
          const std::regex re((*e)[1].str());
          for (std::string& line : lines) {
            line = std::regex_replace(line, re, (*e)[2].str(),
                                      std::regex_constants::format_sed | std::regex_constants::format_first_only);
          }
        } catch (const std::regex_error&) {  // A pattern sed would read and ECMAScript not: not followed.
        }
      }
      it->second = absl::StrJoin(lines, "\n");
    }
  }
}

// Applies one successful file call to `files`.
void Apply(const agent::ToolCall& call, std::map<std::string, std::string>* files) {
  if (call.name == "Bash") {
    ReplayBash(Str(call.arguments, "command"), files);
    return;
  }
  const std::string path = Str(call.arguments, "path");
  if (call.name == "Write") {
    (*files)[path] = Str(call.arguments, "content");
    return;
  }
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string& text = (*files)[path];
    const size_t p = text.find(from);
    if (!from.empty() && p != std::string::npos) text.replace(p, from.size(), to);
  };
  if (call.name == "Edit") replace(Str(call.arguments, "old_string"), Str(call.arguments, "new_string"));
  if (call.name == "MultiEdit") {
    if (const Json* edits = FindJson(call.arguments, "edits"); edits != nullptr && edits->is_array()) {
      for (const Json& e : *edits) replace(Str(e, "old_string"), Str(e, "new_string"));
    }
  }
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// What each design of the model's earned on each task.
Json DesignsByTask(const std::vector<TrajectoryFacts>& facts) {
  struct Outcomes {
    std::vector<double> rewards, vs_eager, vs_compile;  // Speed-ups of the profiled verdicts only.
  };
  std::map<std::string, std::map<std::string, Outcomes>> by_task;
  for (const TrajectoryFacts& f : facts) {
    if (f.source != "model") continue;
    Outcomes& o = by_task[f.task_id][f.design];
    o.rewards.push_back(f.reward);
    if (f.speedup_vs_eager > 0) o.vs_eager.push_back(f.speedup_vs_eager);
    if (f.speedup_vs_compile > 0) o.vs_compile.push_back(f.speedup_vs_compile);
  }
  Json out = Json::object();
  for (const auto& [task, designs] : by_task) {
    Json row = Json::object();
    for (const auto& [design, o] : designs) {
      std::map<std::string, int64_t> hist;
      double sum = 0;
      for (double r : o.rewards) ++hist[absl::StrCat(r)], sum += r;
      Json h = Json::object();
      for (const auto& [r, n] : hist) h[r] = Json(n);
      row[design] = Json::object({{"n", Json(static_cast<int64_t>(o.rewards.size()))},
                                  {"reward_mean", Json(sum / o.rewards.size())},
                                  {"reward_max", Json(*std::max_element(o.rewards.begin(), o.rewards.end()))},
                                  {"rewards", std::move(h)},
                                  {"profiled", Json(static_cast<int64_t>(o.vs_eager.size()))},
                                  {"speedup_vs_eager_median", Json(Median(o.vs_eager))},
                                  {"speedup_vs_compile_median", Json(Median(o.vs_compile))}});
    }
    out[task] = std::move(row);
  }
  return out;
}

// The design a kernel file reads as (TrajectoryFacts::design); "other" without the task's spec.
std::string DesignOf(const absl::StatusOr<agent::family::TaskSpec>& spec, const std::string& device,
                     const std::string& text) {
  if (!spec.ok()) return "other";
  auto r = RecogniseKernel(*spec, device, text);
  if (r.ok() && !r->faulty) return agent::family::ChoiceDigits(r->choice);
  if (auto near = NearestRendering(*spec, device, text, kNearEdits); near.ok()) {
    return "~" + agent::family::ChoiceDigits(near->choice);
  }
  return "other";
}

const std::string* KernelOf(const std::map<std::string, std::string>& files) {
  for (const auto& [path, text] : files) {
    if (absl::StartsWith(path, "kernels/")) return &text;
  }
  return nullptr;
}

}  // namespace

TrajectoryFacts Facts(const v1::Trajectory& t, const std::string& reference_source, const std::string& device) {
  TrajectoryFacts f;
  f.id = t.id();
  f.source = absl::StrContains(t.id(), "/engineer-") ? "engineer" : "model";
  f.task_id = t.task_id();
  f.policy_version = t.policy_version();
  f.reward = t.reward();
  f.verdict_reward = t.final_verdict().reward();
  f.outcome = v1::Verdict::Outcome_Name(t.final_verdict().outcome());
  f.worker = t.final_verdict().worker_id();
  f.speedup_vs_eager = t.final_verdict().speedup_vs_eager();
  f.speedup_vs_compile = t.final_verdict().speedup_vs_compile();
  for (int32_t m : t.loss_mask()) f.model_tokens += m;
  for (const v1::Turn& turn : t.turns()) {
    f.passed_then_failed |= turn.has_verdict() && turn.verdict().reward() > 0 && f.reward < 0;
  }
  auto spec = agent::family::ParseTaskSpec(reference_source);
  if (spec.ok()) f.family = spec->family;
  auto op_lines = [&spec](const std::string& kernel) -> std::string {
    if (!spec.ok() || agent::family::PointwiseOps(*spec).empty()) return "";
    return OpLinesRight(*spec, kernel) ? "right" : "wrong";
  };
  std::map<std::string, std::string> files;
  std::string profiled;  // The design the last answered Profile timed.
  // (token, design) as the kernel changed: the last is the kernel's design now ("" without one).
  std::vector<std::pair<int64_t, std::string>> changes = {{0, ""}};
  const auto& turns = t.turns();
  for (int i = 0; i < turns.size(); ++i) {
    if (turns[i].role() != v1::Turn::ASSISTANT) continue;
    ++f.assistant_turns;
    auto calls = agent::ParseToolCalls(turns[i].content());
    if (!calls.ok()) {
      ++f.parse_errors;
      continue;
    }
    f.tool_calls += static_cast<int>(calls->size());
    // The tool turns that follow answer the calls in order; an "Error:" answer changed nothing.
    for (size_t k = 0; k < calls->size(); ++k) {
      const int j = i + 1 + static_cast<int>(k);
      const bool answered = j < turns.size() && turns[j].role() == v1::Turn::TOOL;
      const std::string& name = (*calls)[k].name;
      // A Bash command that exits non-zero (a sed or cp that found no file) counts as failed too.
      const bool failed = answered && (absl::StartsWith(turns[j].content(), "Error") ||
                                       (name == "Bash" && !absl::StartsWith(turns[j].content(), "exit status 0\n")));
      const bool file_call = name == "Write" || name == "Edit" || name == "MultiEdit" || name == "Bash";
      if (!failed) Apply((*calls)[k], &files);
      f.failed_file_calls += failed && file_call;
      if (file_call && !failed) {  // Only these change the files: the design is read again after them alone.
        const std::string* kernel = KernelOf(files);
        if (kernel != nullptr && changes.size() == 1) f.first_op_lines = op_lines(*kernel);
        const std::string design = kernel == nullptr ? "" : DesignOf(spec, device, *kernel);
        if (design != changes.back().second) changes.emplace_back(turns[i].token_begin(), design);
      }
      if (name == "Profile" && answered && !failed) {
        const std::string design = changes.back().second.empty() ? "none" : changes.back().second;
        if (f.profiles++ > 0) {
          ++f.revisions;
          f.revisions_changed_design += design != profiled;
        }
        profiled = design;
      }
    }
  }
  for (size_t c = 0; c < changes.size(); ++c) {
    const int64_t end = c + 1 < changes.size() ? changes[c + 1].first : t.loss_mask_size();
    TrajectoryFacts::DesignSpan span{changes[c].second, 0};
    for (int64_t k = std::max<int64_t>(0, changes[c].first); k < std::min<int64_t>(end, t.loss_mask_size()); ++k) {
      span.model_tokens += t.loss_mask(static_cast<int>(k));
    }
    f.design_spans.push_back(std::move(span));
  }
  f.design = changes.back().second.empty() ? "none" : changes.back().second;
  if (const std::string* kernel = KernelOf(files)) f.op_lines = op_lines(*kernel);
  return f;
}

Json Summarise(const std::vector<TrajectoryFacts>& facts, int64_t bucket) {
  bucket = std::max<int64_t>(1, bucket);
  struct Totals {
    int64_t n = 0, calls = 0, turns = 0, tokens = 0, errors = 0, reward_matches = 0, with_kernel = 0;
    int64_t failed_file_calls = 0, profiles = 0, revisions = 0, revisions_changed_design = 0;
    int64_t passed_then_failed = 0;
  };
  std::map<std::string, Totals> by_source;
  // family -> bucket start -> design -> count (the model's trajectories).
  std::map<std::string, std::map<int64_t, std::map<std::string, int64_t>>> designs;
  // family -> bucket start -> "right" / "wrong" -> count (the model's kernels with pointwise ops).
  std::map<std::string, std::map<int64_t, std::map<std::string, int64_t>>> op_lines;
  int64_t reward_matches = 0, errors = 0;
  for (const TrajectoryFacts& f : facts) {
    Totals& t = by_source[f.source];
    ++t.n;
    t.calls += f.tool_calls;
    t.turns += f.assistant_turns;
    t.tokens += f.model_tokens;
    t.errors += f.parse_errors;
    t.with_kernel += f.design != "none";
    t.failed_file_calls += f.failed_file_calls;
    t.profiles += f.profiles;
    t.revisions += f.revisions;
    t.revisions_changed_design += f.revisions_changed_design;
    t.passed_then_failed += f.passed_then_failed;
    reward_matches += f.reward == f.verdict_reward;
    errors += f.parse_errors;
    if (f.source != "model") continue;
    const std::string family = f.family.empty() ? "unknown" : f.family;
    const int64_t start = f.policy_version / bucket * bucket;
    ++designs[family][start][f.design];
    if (!f.op_lines.empty()) ++op_lines[family][start][f.op_lines];
  }
  Json sources = Json::object();
  for (const auto& [source, t] : by_source) {
    const double n = std::max<int64_t>(1, t.n);
    sources[source] = Json::object({{"trajectories", Json(t.n)},
                                      {"mean_tool_calls", Json(t.calls / n)},
                                      {"mean_assistant_turns", Json(t.turns / n)},
                                      {"mean_model_tokens", Json(t.tokens / n)},
                                      {"parse_errors", Json(t.errors)},
                                      {"with_kernel", Json(t.with_kernel)},
                                      {"failed_file_calls", Json(t.failed_file_calls)},
                                      {"profiles", Json(t.profiles)},
                                      {"revisions", Json(t.revisions)},
                                      {"revisions_changed_design", Json(t.revisions_changed_design)},
                                      {"passed_then_failed", Json(t.passed_then_failed)}});
  }
  Json by_family = Json::object();
  for (const auto& [family, buckets] : designs) {
    Json rows = Json::array();
    for (const auto& [start, hist] : buckets) {
      Json h = Json::object();
      for (const auto& [design, count] : hist) h[design] = Json(count);
      Json row = Json::object({{"versions", Json(absl::StrCat(start, "-", start + bucket - 1))},
                               {"designs", std::move(h)}});
      if (auto it = op_lines[family].find(start); it != op_lines[family].end()) {
        Json o = Json::object();
        for (const auto& [verdict, count] : it->second) o[verdict] = Json(count);
        row["op_lines"] = std::move(o);
      }
      rows.push_back(std::move(row));
    }
    by_family[family] = std::move(rows);
  }
  return Json::object({{"trajectories", Json(static_cast<int64_t>(facts.size()))},
                       {"parse_errors", Json(errors)},
                       {"reward_is_verdict_reward", Json(reward_matches)},
                       {"by_source", std::move(sources)},
                       {"designs_by_family", std::move(by_family)},
                       {"designs_by_task", DesignsByTask(facts)},
                       {"value_ceiling", ValueCeiling(facts)}});
}

Json ValueCeiling(const std::vector<TrajectoryFacts>& facts) {
  const size_t n = facts.size();
  if (n < 2) return Json::object({{"trajectories", Json(static_cast<int64_t>(n))}});
  auto first_design = [](const TrajectoryFacts& f) {
    for (const auto& s : f.design_spans) {
      if (!s.design.empty()) return s.design;
    }
    return std::string("none");
  };
  // Each trajectory's value by key, leave one out or in sample; `fallback` where no other has its key.
  auto values = [&](const std::function<std::string(const TrajectoryFacts&)>& key, bool in_sample,
                    const std::vector<double>& fallback) {
    std::map<std::string, std::pair<double, int>> sums;
    for (const TrajectoryFacts& f : facts) {
      auto& s = sums[key(f)];
      s.first += f.reward;
      ++s.second;
    }
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) {
      const auto& [sum, count] = sums[key(facts[i])];
      v[i] = in_sample ? sum / count : count > 1 ? (sum - facts[i].reward) / (count - 1) : fallback[i];
    }
    return std::make_pair(v, static_cast<int64_t>(sums.size()));
  };
  double total = 0;
  for (const TrajectoryFacts& f : facts) total += f.reward;
  std::vector<double> all(n);
  for (size_t i = 0; i < n; ++i) all[i] = (total - facts[i].reward) / (n - 1);
  auto ev = [&](const std::vector<double>& v) {  // Over the trajectories.
    double res = 0, tot = 0;
    for (size_t i = 0; i < n; ++i) {
      res += (facts[i].reward - v[i]) * (facts[i].reward - v[i]);
      tot += (facts[i].reward - total / n) * (facts[i].reward - total / n);
    }
    return tot > 0 ? Json(1 - res / tot) : Json();
  };
  auto by_token = [&](const std::vector<double>& task, const std::vector<double>& first,
                      const std::vector<double>& ended) {
    double tokens = 0, sum = 0, sq = 0, res = 0;
    for (size_t i = 0; i < n; ++i) {
      const auto& spans = facts[i].design_spans;
      for (size_t s = 0; s < spans.size(); ++s) {
        const double k = static_cast<double>(spans[s].model_tokens), y = facts[i].reward;
        const double v = spans[s].design.empty() ? task[i] : s + 1 < spans.size() ? first[i] : ended[i];
        tokens += k;
        sum += k * y;
        sq += k * y * y;
        res += k * (y - v) * (y - v);
      }
    }
    const double tot = sq - sum * sum / std::max(1.0, tokens);
    return tot > 0 ? Json(1 - res / tot) : Json();
  };
  auto task = [](const TrajectoryFacts& f) { return f.task_id; };
  auto first = [&](const TrajectoryFacts& f) { return f.task_id + "\n" + first_design(f); };
  auto ended = [](const TrajectoryFacts& f) { return f.task_id + "\n" + f.design; };
  Json out = Json::object({{"trajectories", Json(static_cast<int64_t>(n))}});
  for (const bool in_sample : {false, true}) {
    const auto [t, tasks] = values(task, in_sample, all);
    const auto [d1, firsts] = values(first, in_sample, t);
    const auto [d2, finals] = values(ended, in_sample, t);
    Json figures = Json::object({{"task", ev(t)}, {"first_design", ev(d1)}, {"final_design", ev(d2)},
                                 {"by_token", by_token(t, d1, d2)}});
    if (in_sample) {
      out["in_sample"] = std::move(figures);
    } else {
      figures["keys"] = Json::object({{"task", Json(tasks)}, {"first_design", Json(firsts)}, {"final_design", Json(finals)}});
      out["leave_one_out"] = std::move(figures);
    }
  }
  return out;
}

}  // namespace kernelrl::codemodel
