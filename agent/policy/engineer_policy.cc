#include "agent/policy/engineer_policy.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "agent/chat/tool_calls.h"

namespace kernelrl::agent {
namespace {

namespace fam = family;

std::vector<std::string> Lines(const std::string& text) { return absl::StrSplit(text, '\n'); }

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

bool Code(const std::string& line) {
  const absl::string_view s = absl::StripLeadingAsciiWhitespace(line);
  return !s.empty() && !absl::StartsWith(s, "//") && !absl::StartsWith(s, "#");
}

std::optional<std::string> DropSemicolon(const std::string& line) {
  if (!Code(line) || !absl::EndsWith(line, ");")) return std::nullopt;
  return line.substr(0, line.size() - 1);
}
std::optional<std::string> MisspellMember(const std::string& line) {
  const size_t p = line.find("threadIdx.x");
  if (!Code(line) || p == std::string::npos) return std::nullopt;
  std::string out = line;
  out[p + 10] = 'X';
  return out;
}
std::optional<std::string> UndeclaredName(const std::string& line) {
  const size_t p = line.find("BLOCK");
  if (!Code(line) || p == std::string::npos) return std::nullopt;
  const char next = p + 5 < line.size() ? line[p + 5] : ' ';
  if (std::isalnum(static_cast<unsigned char>(next)) || next == '_') return std::nullopt;
  return line.substr(0, p) + "BLOCKSZ" + line.substr(p + 5);
}

}  // namespace

const std::vector<FaultKind>& Faults() {
  static const auto* f = new std::vector<FaultKind>{
      {DropSemicolon, "expected a \";\"", "expected ';' before '}' token"},
      {MisspellMember, "class \"uint3\" has no member \"X\"", "'struct dim3' has no member named 'X'"},
      {UndeclaredName, "identifier \"BLOCKSZ\" is undefined", "'BLOCKSZ' was not declared in this scope"},
  };
  return *f;
}

namespace {

std::string KernelPath(const std::map<std::string, std::string>& files) {
  for (const auto& [path, content] : files) {
    if (absl::StartsWith(path, "kernels/")) return path;
  }
  return "";
}

absl::StatusOr<std::map<std::string, std::string>> RenderFor(const fam::TaskSpec& spec, const fam::Choice& c,
                                                             const std::string& device) {
  return fam::Render(spec, c, device);
}

std::string Pick(std::mt19937_64& rng, const std::vector<std::string>& options) {
  return options[rng() % options.size()];
}

Json WriteArgs(const std::string& path, const std::string& content) {
  return Json::object({{"path", Json(path)}, {"content", Json(content)}});
}

// The calls that turn `from` into `to` in file `path`: one Edit or MultiEdit of the
// changed lines when each is unique in `from`, else (or with `rewrite`) a Write of the whole file.
std::string EditCalls(const std::string& path, const std::string& from, const std::string& to, bool rewrite) {
  if (rewrite) return FormatToolCall("Write", WriteArgs(path, to));
  const std::vector<std::string> a = Lines(from), b = Lines(to);
  std::vector<std::pair<std::string, std::string>> changes;
  bool unique = a.size() == b.size();
  for (size_t i = 0; unique && i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    if (a[i].empty() || Count(from, a[i]) != 1) unique = false;
    changes.emplace_back(a[i], b[i]);
  }
  if (!unique || changes.empty() || changes.size() > 4) {
    return FormatToolCall("Write", WriteArgs(path, to));
  }
  if (changes.size() == 1) {
    return FormatToolCall("Edit", Json::object({{"path", Json(path)},
                                                       {"old_string", Json(changes[0].first)},
                                                       {"new_string", Json(changes[0].second)}}));
  }
  Json edits = Json::array();
  for (const auto& [o, n] : changes) {
    edits.push_back(Json::object({{"old_string", Json(o)}, {"new_string", Json(n)}}));
  }
  return FormatToolCall("MultiEdit", Json::object({{"path", Json(path)}, {"edits", std::move(edits)}}));
}

std::string Call(const std::string& name) { return FormatToolCall(name, Json::object()); }

// The number after `label` in a Profile observation, up to `end`: "speed-up vs eager 1.234x",
// "vs torch.compile 0.812x", "reward 2" (actor/tools.cc's Profile text).
std::optional<double> FigureAfter(const std::string& observation, const std::string& label, char end) {
  const size_t p = observation.find(label);
  if (p == std::string::npos) return std::nullopt;
  const size_t from = p + label.size();
  double v = 0;
  if (!absl::SimpleAtod(observation.substr(from, observation.find(end, from) - from), &v)) return std::nullopt;
  return v;
}
std::optional<double> EagerSpeedup(const std::string& observation) {
  return FigureAfter(observation, "speed-up vs eager ", 'x');
}

}  // namespace

std::string KernelPathOf(const std::map<std::string, std::string>& files) { return KernelPath(files); }

std::optional<std::string> SedForDesignChange(const std::string& path, const std::string& from, const std::string& to) {
  const std::vector<std::string> a = Lines(from), b = Lines(to);
  if (a.size() != b.size()) return std::nullopt;
  std::vector<std::string> exprs;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    const std::vector<std::string> words = absl::StrSplit(b[i], ' ');
    const size_t design = b[i].find("; choice ");
    if (words.size() == 3 && words[0] == "#define" && absl::StartsWith(a[i], absl::StrCat("#define ", words[1], " "))) {
      exprs.push_back(absl::StrCat("s/^#define ", words[1], " .*/", b[i], "/"));
    } else if (i == 0 && design != std::string::npos && a[i].compare(0, design + 9, b[i], 0, design + 9) == 0) {
      exprs.push_back(absl::StrCat("s/; choice .*/", b[i].substr(design), "/"));  // The task's words stay.
    } else {
      return std::nullopt;
    }
  }
  if (exprs.empty()) return std::nullopt;
  std::string command = "sed -i";
  for (const std::string& e : exprs) {
    if (e.find_first_of("&\\'\n") != std::string::npos || std::count(e.begin(), e.end(), '/') != 3) return std::nullopt;
    absl::StrAppend(&command, " -e '", e, "'");
  }
  return absl::StrCat(command, " ", path);
}

struct EngineerPolicy::Episode {
  std::mt19937_64 rng;
  uint64_t last_use = 0;  // EngineerPolicy::uses_ at its latest reply.
  bool have_task = false;
  fam::TaskSpec spec;
  std::vector<fam::Slot> slots;
  std::string kernel_path, written;  // The kernel as last written.
  fam::Choice choice{}, best{};
  std::optional<fam::Choice> saved;  // The design kBestKernelCopy holds (shell_changes).
  double best_speed = -1;
  int revisions_left = 0;
  bool closing = false;
};

EngineerPolicy::EngineerPolicy(const Tokenizer* tokenizer, int32_t im_end_id, EngineerPolicyOptions options,
                         uint64_t seed)
    : tokenizer_(tokenizer), im_end_id_(im_end_id), options_(std::move(options)), rng_(seed) {}

absl::StatusOr<std::string> EngineerPolicy::Next(Episode& e, const std::string& obs) {
  auto& rng = e.rng;
  auto uniform = [&] { return static_cast<double>(rng() % 1000000) / 1e6; };
  const std::string& device = options_.device;
  auto render = [&](const fam::Choice& c) -> absl::StatusOr<std::map<std::string, std::string>> {
    return RenderFor(e.spec, c, device);
  };
  auto describe = [&](const fam::Choice& c) { return fam::DescribeChoice(e.slots, c); };
  auto bash = [](const std::string& command) {
    return FormatToolCall("Bash", Json::object({{"command", Json(command)}}));
  };
  // The calls that turn the kernel as written into `to`, another design of the same task; `save`
  // first copies the kernel as it is (the best so far, about to be revised away from).
  auto design_change = [&](const std::string& to, bool save) {
    if (!options_.shell_changes) return EditCalls(e.kernel_path, e.written, to, options_.rewrite_kernel);
    const std::string copy = absl::StrCat("cp ", e.kernel_path, " ", kBestKernelCopy);
    if (save) e.saved = e.choice;
    if (std::optional<std::string> sed = SedForDesignChange(e.kernel_path, e.written, to)) {
      return bash(save ? absl::StrCat(copy, " && ", *sed) : *sed);
    }
    return absl::StrCat(save ? bash(copy) + "\n" : "", EditCalls(e.kernel_path, e.written, to, options_.rewrite_kernel));
  };

  if (!e.have_task) {
    if (obs.empty()) {
      Json read_args = Json::object({{"path", Json("model.py")}});
      if (options_.read_lines > 0) read_args["limit"] = Json(static_cast<int64_t>(options_.read_lines));
      return absl::StrCat(Pick(rng, {"I start by reading the reference model.", "First, the reference: model.py.",
                                     "Let me read model.py to see what the task computes."}),
                          "\n", FormatToolCall("Read", read_args));
    }
    auto spec = fam::FindTaskSpec(obs);
    if (absl::IsNotFound(spec.status())) return absl::FailedPreconditionError("model.py has no kernelrl-family line");
    if (!spec.ok()) return spec.status();
    e.spec = *spec;
    auto slots = fam::Slots(e.spec.family);
    if (!slots.ok()) return slots.status();
    e.slots = *slots;
    e.have_task = true;
    e.revisions_left = options_.revisions;
    for (int i = 0; i < fam::kNumSlots; ++i) e.choice[i] = static_cast<int>(rng() % e.slots[i].options.size());
    e.choice[fam::kNumSlots - 1] = uniform() < options_.fp16_rate ? 1 : 0;
    auto files = render(e.choice);
    if (!files.ok()) return files.status();
    e.kernel_path = KernelPath(*files);
    std::string kernel = files->at(e.kernel_path);
    if (uniform() < options_.fault_rate) {  // Plant a fault on a random applicable line.
      std::vector<std::string> lines = Lines(kernel);
      std::vector<std::pair<const FaultKind*, size_t>> at;  // Every (fault, line) that applies.
      for (const FaultKind& f : Faults()) {
        for (size_t i = 0; i < lines.size(); ++i) {
          if (f.apply(lines[i])) at.emplace_back(&f, i);
        }
      }
      if (!at.empty()) {
        const auto [f, i] = at[rng() % at.size()];
        lines[i] = *f->apply(lines[i]);
        kernel = absl::StrJoin(lines, "\n");
      }
    }
    e.written = kernel;
    return absl::StrCat("The task is ", fam::DescribeTask(e.spec), ". ",
                        Pick(rng, {"I write the kernel with ", "My first design: ", "Plan: one kernel, "}),
                        describe(e.choice), ", and model_new.py that calls it; then I compile.\n",
                        FormatToolCall("Write", WriteArgs(e.kernel_path, kernel)), "\n",
                        FormatToolCall("Write", WriteArgs("model_new.py", files->at("model_new.py"))), "\n",
                        Call("Compile"));
  }
  if (e.closing) return std::string();
  auto clean = render(e.choice);
  if (!clean.ok()) return clean.status();
  const std::string& clean_kernel = clean->at(e.kernel_path);
  if (absl::StrContains(obs, "COMPILE_ERROR")) {
    const std::string fixed = clean_kernel;
    std::string calls = EditCalls(e.kernel_path, e.written, fixed, options_.rewrite_kernel);
    e.written = fixed;
    return absl::StrCat(Pick(rng, {"The compiler points at one line; I fix it.", "A typo in the kernel. Fixing it.",
                                   "Compile error: I correct that line and compile again."}),
                        "\n", calls, "\n", Call("Compile"));
  }
  if (absl::StrContains(obs, "Compile: OK")) {
    return absl::StrCat(Pick(rng, {"It compiles. Now correctness.", "Compiled. Verifying.", "Next: Verify."}), "\n",
                        Call("Verify"));
  }
  if (absl::StrContains(obs, "WRONG_ANSWER") || absl::StrContains(obs, "Profile: WRONG")) {
    fam::Choice next = e.choice;
    next[fam::kNumSlots - 1] = 0;
    auto files = render(next);
    if (!files.ok()) return files.status();
    std::string calls = design_change(files->at(e.kernel_path), false);
    e.choice = next;
    e.written = files->at(e.kernel_path);
    return absl::StrCat(Pick(rng, {"Wrong answer: fp16 overflows on large inputs and fails the strict precision "
                                   "check. Back to fp32.",
                                   "Half precision is not accurate enough here; switching to fp32."}),
                        "\n", calls, "\n", Call("Verify"));
  }
  if (absl::StrContains(obs, "Verify: OK")) {
    return absl::StrCat(Pick(rng, {"Correct. Let me time it.", "Verified. Profiling.", "Passes; now the speed."}), "\n",
                        Call("Profile"));
  }
  if (std::optional<double> s = EagerSpeedup(obs)) {
    if (*s > e.best_speed) e.best_speed = *s, e.best = e.choice;
    const std::optional<double> paid = FigureAfter(obs, "\nreward ", '\n');
    const double x_compile = FigureAfter(obs, "vs torch.compile ", 'x').value_or(0);
    const bool read_paid = options_.stop_at_reward > 0 && paid.has_value();
    // What the reply after the verdict opens with: the verdict as read.
    const std::string why = read_paid ? absl::StrFormat("Reward %g: %.2fx eager, %.2fx compile.", *paid, *s, x_compile)
                                      : absl::StrFormat("%.2fx eager.", *s);
    if (read_paid && *paid >= options_.stop_at_reward) {
      e.closing = true;
      return absl::StrFormat("%s Done. Final design: %s.", why, describe(e.choice));
    }
    if (e.revisions_left > 0) {
      --e.revisions_left;
      fam::Choice next = e.choice;
      const int slot = static_cast<int>(rng() % (fam::kNumSlots - 1));  // Precision stays fp32.
      next[slot] = (next[slot] + 1 + static_cast<int>(rng() % (e.slots[slot].options.size() - 1))) %
                   static_cast<int>(e.slots[slot].options.size());
      auto files = render(next);
      if (!files.ok()) return files.status();
      std::string calls = design_change(files->at(e.kernel_path), e.best == e.choice && e.saved != e.choice);
      e.choice = next;
      e.written = files->at(e.kernel_path);
      return absl::StrFormat("%s Trying %s=%s instead.\n%s\n%s", why, e.slots[slot].name,
                             e.slots[slot].options[next[slot]], calls, Call("Profile"));
    }
    if (e.best != e.choice) {
      auto files = render(e.best);
      if (!files.ok()) return files.status();
      std::string calls = options_.shell_changes && e.saved == e.best
                              ? bash(absl::StrCat("cp ", kBestKernelCopy, " ", e.kernel_path))
                              : EditCalls(e.kernel_path, e.written, files->at(e.kernel_path), options_.rewrite_kernel);
      e.choice = e.best;
      e.written = files->at(e.kernel_path);
      return absl::StrFormat("%.2fx eager is slower than the best so far (%.2fx); back to %s.\n%s\n%s", *s,
                             e.best_speed, describe(e.best), calls, Call("Profile"));
    }
    e.closing = true;
    return absl::StrFormat("Done. Final design: %s, %.2fx eager.", describe(e.choice), *s);
  }
  // Anything else (a crash, a bad workspace): write the current design out whole again.
  std::string calls = absl::StrCat(FormatToolCall("Write", WriteArgs(e.kernel_path, clean_kernel)), "\n",
                                   FormatToolCall("Write", WriteArgs("model_new.py", clean->at("model_new.py"))));
  e.written = clean_kernel;
  return absl::StrCat("Something went wrong; I write both files again.\n", calls, "\n", Call("Compile"));
}

absl::StatusOr<PolicyResponse> EngineerPolicy::Generate(const PolicyRequest& request) {
  const std::string key = request.request_id.substr(0, request.request_id.rfind("/turn-"));
  std::shared_ptr<Episode> e;
  {
    absl::MutexLock lock(&mu_);
    auto& slot = episodes_[key];
    if (slot == nullptr) {
      slot = std::make_shared<Episode>();
      // The rollout's seed when it has one (a lease's), so an episode does not depend on
      // which of this actor's episodes came first.
      slot->rng.seed(request.seed != 0 ? request.seed : rng_());
    }
    slot->last_use = ++uses_;
    e = slot;
    // Episodes cut short (turn or wall budget) never close: forget those idle for a long while.
    if (episodes_.size() > kMaxIdleEpisodes) {
      for (auto it = episodes_.begin(); it != episodes_.end();) {
        it = uses_ - it->second->last_use > kMaxIdleEpisodes ? episodes_.erase(it) : std::next(it);
      }
    }
  }
  // What the tools said since this agent's last reply.
  std::string observation;
  if (request.history != nullptr) {
    for (auto it = request.history->rbegin(); it != request.history->rend(); ++it) {
      if (it->role != ChatRole::kTool) break;
      observation = it->content + "\n" + observation;
    }
  }
  absl::StatusOr<std::string> text = Next(*e, observation);
  if (!text.ok()) return text.status();
  if (e->closing) {
    absl::MutexLock lock(&mu_);
    episodes_.erase(key);
  }
  PolicyResponse out;
  out.ids = tokenizer_->Encode(*text);
  out.ids.push_back(im_end_id_);
  out.logprobs.assign(out.ids.size(), 0.f);
  out.policy_version = options_.policy_version;
  out.finish_reason = "stop";
  out.sampling.set_policy("scripted");  // Written by rules, not sampled: its log-probs are placeholders.
  return out;
}

}  // namespace kernelrl::agent
