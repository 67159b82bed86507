#include "tools/codemodel/corpus.h"

#include <cmath>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "actor/rollout.h"
#include "agent/chat/chat_format.h"
#include "agent/chat/tool_calls.h"
#include "agent/chat/tools.h"
#include "agent/tokenizer/bpe_trainer.h"
#include "profiler_service/reward.h"

namespace kernelrl::codemodel {
namespace {

namespace fam = agent::family;

std::vector<std::string> Lines(const std::string& text) { return absl::StrSplit(text, '\n'); }

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

// The planted faults. Each turns one clean line into a faulty one (nullopt: not
// applicable to that line) and says what the compiler answers.
struct FaultKind {
  std::optional<std::string> (*apply)(const std::string& line);
  const char* cuda_message;
  const char* cpu_message;
};

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

const std::vector<FaultKind>& Faults() {
  static const auto* f = new std::vector<FaultKind>{
      {DropSemicolon, "expected a \";\"", "expected ';' before '}' token"},
      {MisspellMember, "class \"uint3\" has no member \"X\"", "'struct dim3' has no member named 'X'"},
      {UndeclaredName, "identifier \"BLOCKSZ\" is undefined", "'BLOCKSZ' was not declared in this scope"},
  };
  return *f;
}

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
  return Json::Object({{"path", Json::String(path)}, {"content", Json::String(content)}});
}

// The calls that turn `from` into `to` in file `path`: one Edit or MultiEdit of the
// changed lines when each is unique in `from`, else a Write of the whole file.
std::string EditCalls(const std::string& path, const std::string& from, const std::string& to) {
  const std::vector<std::string> a = Lines(from), b = Lines(to);
  std::vector<std::pair<std::string, std::string>> changes;
  bool unique = a.size() == b.size();
  for (size_t i = 0; unique && i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    if (a[i].empty() || Count(from, a[i]) != 1) unique = false;
    changes.emplace_back(a[i], b[i]);
  }
  if (!unique || changes.empty() || changes.size() > 4) {
    return agent::FormatToolCall("Write", WriteArgs(path, to));
  }
  if (changes.size() == 1) {
    return agent::FormatToolCall("Edit", Json::Object({{"path", Json::String(path)},
                                                       {"old_string", Json::String(changes[0].first)},
                                                       {"new_string", Json::String(changes[0].second)}}));
  }
  Json edits = Json::Array();
  for (const auto& [o, n] : changes) {
    edits.Push(Json::Object({{"old_string", Json::String(o)}, {"new_string", Json::String(n)}}));
  }
  return agent::FormatToolCall("MultiEdit", Json::Object({{"path", Json::String(path)}, {"edits", std::move(edits)}}));
}

std::string Call(const std::string& name) { return agent::FormatToolCall(name, Json::Object()); }

// "speed-up vs eager 1.234x" in a Profile observation.
std::optional<double> EagerSpeedup(const std::string& observation) {
  const size_t p = observation.find("speed-up vs eager ");
  if (p == std::string::npos) return std::nullopt;
  double v = 0;
  std::string num = observation.substr(p + 18, observation.find('x', p + 18) - (p + 18));
  if (!absl::SimpleAtod(num, &v)) return std::nullopt;
  return v;
}

std::vector<int64_t> ShapeOf(const v1::Task& task) {
  std::vector<int64_t> shape;
  auto it = task.metadata().find("shape");
  if (it == task.metadata().end()) return shape;
  for (absl::string_view d : absl::StrSplit(it->second, 'x')) {
    int64_t v = 0;
    if (absl::SimpleAtoi(d, &v)) shape.push_back(v);
  }
  return shape;
}

uint64_t Mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001B3ull + 0x9E3779B97F4A7C15ull; }

}  // namespace

absl::StatusOr<Recognised> RecogniseKernel(const fam::TaskSpec& spec, const std::string& device,
                                           const std::string& kernel) {
  auto slots = fam::Slots(spec.family);
  if (!slots.ok()) return slots.status();
  const std::vector<std::string> got = Lines(kernel);
  for (const fam::Choice& c : fam::AllChoices(*slots)) {
    auto files = RenderFor(spec, c, device);
    if (!files.ok()) return files.status();
    const std::string& clean = files->at(KernelPath(*files));
    if (clean == kernel) return Recognised{c, false, {}};
    const std::vector<std::string> want = Lines(clean);
    if (want.size() != got.size()) continue;
    int diff = -1, n = 0;
    for (size_t i = 0; i < want.size() && n < 2; ++i) {
      if (want[i] != got[i]) diff = static_cast<int>(i), ++n;
    }
    if (n != 1) continue;
    for (const FaultKind& f : Faults()) {
      if (f.apply(want[diff]) == got[diff]) {
        return Recognised{c, true, Fault{got[diff], diff + 1, device == "cpu" ? f.cpu_message : f.cuda_message}};
      }
    }
  }
  return absl::NotFoundError("not a rendering of the family's template");
}

double ModelledSpeedup(const fam::TaskSpec& spec, const fam::Choice& c, const std::vector<int64_t>& shape) {
  const int64_t cols = shape.size() >= 2 ? shape[1] : 1024;
  if (spec.family == "elementwise") {
    static constexpr double kVec[] = {0.8, 1.05, 1.35}, kBlock[] = {0.85, 1.0, 0.95}, kWork[] = {1.0, 1.1, 0.6};
    return 1.4 * kVec[c[0]] * kBlock[c[1]] * kWork[c[2]];
  }
  if (spec.family == "rowreduce") {
    // Long rows want a block per row; short ones a warp.
    static constexpr double kShort[] = {0.1, 1.6, 0.9}, kLong[] = {0.05, 0.9, 1.5}, kBlock[] = {1.0, 1.05, 0.9};
    const double strategy = cols > 2048 ? kLong[c[0]] : kShort[c[0]];
    const double vec = c[2] == 1 ? (cols % 4 == 0 ? 1.1 : 0.9) : 1.0;
    return strategy * kBlock[c[1]] * vec;
  }
  static constexpr double kGemm[] = {1.0, 0.25, 0.45}, kEpi[] = {0.9, 1.2}, kBlock[] = {1.0, 1.02, 0.98};
  return 1.1 * kGemm[c[0]] * kEpi[c[1]] * kBlock[c[2]];
}

v1::Verdict DesignEvaluator::Evaluate(const v1::EvaluateRequest& request) {
  v1::Verdict v;
  v.set_worker_id("corpus-design-model");
  auto spec = fam::ParseTaskSpec(request.task().reference_source());
  if (!spec.ok()) {
    v.set_outcome(v1::Verdict::INFRA_ERROR);
    v.set_summary(std::string(spec.status().message()));
    return v;
  }
  const std::string device = request.task().inputs().device() == "cpu" ? "cpu" : "cuda";
  std::string kernel_path, kernel;
  bool has_model_new = false;
  for (const v1::WorkspaceFile& f : request.workspace().files()) {
    if (absl::StartsWith(f.path(), "kernels/")) kernel_path = f.path(), kernel = f.content();
    if (f.path() == "model_new.py") has_model_new = true;
  }
  if (kernel_path.empty() || !has_model_new) {
    v.set_outcome(v1::Verdict::BAD_WORKSPACE);
    v.set_summary(kernel_path.empty() ? "no kernels/ source in the workspace" : "model_new.py is missing");
    v.set_reward(RewardFor(v));
    return v;
  }
  auto r = RecogniseKernel(*spec, device, kernel);
  if (!r.ok()) {
    v.set_outcome(v1::Verdict::COMPILE_ERROR);
    v.set_summary("1 error");
    auto* d = v.add_diagnostics();
    d->set_file(kernel_path);
    d->set_line(1);
    d->set_column(1);
    d->set_severity("error");
    d->set_message("this source does not build");
    v.set_reward(RewardFor(v));
    return v;
  }
  if (r->faulty) {
    v.set_outcome(v1::Verdict::COMPILE_ERROR);
    v.set_summary("1 error");
    auto* d = v.add_diagnostics();
    d->set_file(kernel_path);
    d->set_line(r->fault.line);
    d->set_column(static_cast<int32_t>(r->fault.broken_line.find_first_not_of(' ')) + 1);
    d->set_severity("error");
    d->set_message(r->fault.message);
    v.set_reward(RewardFor(v));
    return v;
  }
  if (r->choice[fam::kNumSlots - 1] == 1) {  // fp16 under the strict precision policy.
    v.set_outcome(v1::Verdict::WRONG_ANSWER);
    v.set_summary("large_magnitude: output differs from the fp64 reference beyond the strict fp32 tolerance");
    (*v.mutable_logs())["verify"] =
        "set large_magnitude: max abs error inf (half-precision overflow above 65504); precision policy strict";
    v.set_reward(RewardFor(v));
    return v;
  }
  v.set_outcome(v1::Verdict::OK);
  if (!request.skip_profile()) {
    const std::vector<int64_t> shape = ShapeOf(request.task());
    uint64_t h = 1469598103934665603ull;
    for (char ch : request.task().id()) h = Mix(h, static_cast<unsigned char>(ch));
    for (int x : r->choice) h = Mix(h, static_cast<uint64_t>(x));
    const double noise = 0.97 + 0.06 * static_cast<double>(h % 1000) / 1000.0;
    double elements = 1;
    for (int64_t d : shape) elements *= static_cast<double>(d);
    const double eager_us = 5 + 2e-4 * elements;
    const double compile_ratio = spec->family == "gemm_epilogue" ? 1.05 : spec->family == "rowreduce" ? 1.3 : 1.5;
    const double s = ModelledSpeedup(*spec, r->choice, shape) * noise;
    v.set_eager_time_us(eager_us);
    v.set_compile_time_us(eager_us / compile_ratio);
    v.set_candidate_time_us(eager_us / s);
    v.set_speedup_vs_eager(s);
    v.set_speedup_vs_compile(s / compile_ratio);
  }
  v.set_reward(RewardFor(v));
  return v;
}

struct CorpusAgent::Episode {
  std::mt19937_64 rng;
  bool have_task = false;
  fam::TaskSpec spec;
  std::vector<fam::Slot> slots;
  std::string kernel_path, written;  // The kernel as last written.
  fam::Choice choice{}, best{};
  double best_speed = -1;
  int revisions_left = 0;
  bool closing = false;
};

CorpusAgent::CorpusAgent(const agent::Tokenizer* tokenizer, int32_t im_end_id, CorpusAgentOptions options,
                         uint64_t seed)
    : tokenizer_(tokenizer), im_end_id_(im_end_id), options_(std::move(options)), rng_(seed) {}

absl::StatusOr<std::string> CorpusAgent::Next(Episode& e, const std::string& obs) {
  auto& rng = e.rng;
  auto uniform = [&] { return static_cast<double>(rng() % 1000000) / 1e6; };
  const std::string device = options_.device.empty() ? "cuda" : options_.device;
  auto render = [&](const fam::Choice& c) -> absl::StatusOr<std::map<std::string, std::string>> {
    return RenderFor(e.spec, c, device);
  };
  auto describe = [&](const fam::Choice& c) { return fam::DescribeChoice(e.slots, c); };

  if (!e.have_task) {
    if (obs.empty()) {
      return absl::StrCat(Pick(rng, {"I start by reading the reference model.", "First, the reference: model.py.",
                                     "Let me read model.py to see what the task computes."}),
                          "\n", agent::FormatToolCall("Read", Json::Object({{"path", Json::String("model.py")}})));
    }
    const size_t p = obs.find(fam::kTaskHeader);
    if (p == std::string::npos) return absl::FailedPreconditionError("model.py has no kernelrl-family line");
    auto spec = fam::ParseTaskSpec(obs.substr(p, obs.find('\n', p) - p));
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
    return absl::StrCat("The task is ", e.spec.family, " (", absl::StrJoin(e.spec.ops, " -> "), "). ",
                        Pick(rng, {"I write the kernel with ", "My first design: ", "Plan: one kernel, "}),
                        describe(e.choice), ", and model_new.py that calls it; then I compile.\n",
                        agent::FormatToolCall("Write", WriteArgs(e.kernel_path, kernel)), "\n",
                        agent::FormatToolCall("Write", WriteArgs("model_new.py", files->at("model_new.py"))), "\n",
                        Call("Compile"));
  }
  if (e.closing) return std::string();
  auto clean = render(e.choice);
  if (!clean.ok()) return clean.status();
  const std::string& clean_kernel = clean->at(e.kernel_path);
  if (absl::StrContains(obs, "COMPILE_ERROR")) {
    const std::string fixed = clean_kernel;
    std::string calls = EditCalls(e.kernel_path, e.written, fixed);
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
    std::string calls = EditCalls(e.kernel_path, e.written, files->at(e.kernel_path));
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
    if (e.revisions_left > 0) {
      --e.revisions_left;
      fam::Choice next = e.choice;
      const int slot = static_cast<int>(rng() % (fam::kNumSlots - 1));  // Precision stays fp32.
      next[slot] = (next[slot] + 1 + static_cast<int>(rng() % (e.slots[slot].options.size() - 1))) %
                   static_cast<int>(e.slots[slot].options.size());
      auto files = render(next);
      if (!files.ok()) return files.status();
      std::string calls = EditCalls(e.kernel_path, e.written, files->at(e.kernel_path));
      e.choice = next;
      e.written = files->at(e.kernel_path);
      return absl::StrFormat("%.2fx eager. Trying %s=%s instead.\n%s\n%s", *s, e.slots[slot].name,
                             e.slots[slot].options[next[slot]], calls, Call("Profile"));
    }
    if (e.best != e.choice) {
      auto files = render(e.best);
      if (!files.ok()) return files.status();
      std::string calls = EditCalls(e.kernel_path, e.written, files->at(e.kernel_path));
      e.choice = e.best;
      e.written = files->at(e.kernel_path);
      return absl::StrFormat("%.2fx eager is slower than the best so far (%.2fx); back to %s.\n%s\n%s", *s,
                             e.best_speed, describe(e.best), calls, Call("Profile"));
    }
    e.closing = true;
    return absl::StrFormat("Done. Final design: %s, %.2fx eager.", describe(e.choice), *s);
  }
  // Anything else (a crash, a bad workspace): write the current design out whole again.
  std::string calls = absl::StrCat(agent::FormatToolCall("Write", WriteArgs(e.kernel_path, clean_kernel)), "\n",
                                   agent::FormatToolCall("Write", WriteArgs("model_new.py", clean->at("model_new.py"))));
  e.written = clean_kernel;
  return absl::StrCat("Something went wrong; I write both files again.\n", calls, "\n", Call("Compile"));
}

absl::StatusOr<agent::PolicyResponse> CorpusAgent::Generate(const agent::PolicyRequest& request) {
  const std::string key = request.request_id.substr(0, request.request_id.rfind("/turn-"));
  std::shared_ptr<Episode> e;
  {
    absl::MutexLock lock(&mu_);
    auto& slot = episodes_[key];
    if (slot == nullptr) {
      slot = std::make_shared<Episode>();
      slot->rng.seed(rng_());
    }
    e = slot;
  }
  // What the tools said since this agent's last reply.
  std::string observation;
  if (request.history != nullptr) {
    for (auto it = request.history->rbegin(); it != request.history->rend(); ++it) {
      if (it->role != agent::ChatRole::kTool) break;
      observation = it->content + "\n" + observation;
    }
  }
  absl::StatusOr<std::string> text = Next(*e, observation);
  if (!text.ok()) return text.status();
  if (e->closing) {
    absl::MutexLock lock(&mu_);
    episodes_.erase(key);
  }
  agent::PolicyResponse out;
  out.ids = tokenizer_->Encode(*text);
  out.ids.push_back(im_end_id_);
  out.logprobs.assign(out.ids.size(), 0.f);
  out.finish_reason = "stop";
  return out;
}

Json CorpusRecord(const v1::Trajectory& t, const std::string& family) {
  Json messages = Json::Array();
  for (const v1::Turn& turn : t.turns()) {
    const char* role = turn.role() == v1::Turn::SYSTEM      ? "system"
                       : turn.role() == v1::Turn::USER      ? "user"
                       : turn.role() == v1::Turn::ASSISTANT ? "assistant"
                                                            : "tool";
    messages.Push(Json::Object({{"role", Json::String(role)}, {"content", Json::String(turn.content())}}));
  }
  return Json::Object({{"task_id", Json::String(t.task_id())},
                       {"family", Json::String(family)},
                       {"reward", Json::Number(t.reward())},
                       {"messages", std::move(messages)}});
}

absl::StatusOr<Corpus> MakeCorpus(const std::vector<v1::Task>& tasks, int per_task, v1::RolloutConfig rc,
                                  const std::string& skill_text, const CorpusAgentOptions& options, uint64_t seed,
                                  const std::string& workspace_root) {
  // Rollouts record ids; the byte-level tokenizer (no merges) serves until the corpus exists.
  auto bootstrap = agent::TrainBpe({}, agent::BpeTrainerOptions{256, 2});
  if (!bootstrap.ok()) return bootstrap.status();
  auto tok = agent::Tokenizer::FromJson(*bootstrap);
  if (!tok.ok()) return tok.status();
  auto with_tools = agent::ChatFormat::Create(tok->get(), agent::ToolSchemas());
  auto plain = agent::ChatFormat::Create(tok->get(), Json::Array());
  if (!with_tools.ok()) return with_tools.status();
  if (!plain.ok()) return plain.status();
  CorpusAgent agent(tok->get(), plain->im_end_id(), options, seed);
  DesignEvaluator evaluator;
  rc.set_max_turns(16);
  rc.set_context_tokens(1 << 22);
  rc.set_max_new_tokens_per_turn(1 << 20);
  rc.set_final_evaluation(true);
  rc.set_wall_seconds(0);
  rc.set_workspace_root(workspace_root);
  rc.mutable_isolation()->set_contain(false);  // No Bash call: the shell never starts.
  v1::ToolLimits& lim = *rc.mutable_tools();
  if (lim.output_cap_bytes() == 0) lim.set_output_cap_bytes(16384);
  if (lim.read_max_lines() == 0) lim.set_read_max_lines(2000);
  if (lim.max_file_bytes() == 0) lim.set_max_file_bytes(1 << 20);
  actor::RolloutRunner runner(actor::RolloutDeps{&agent, &evaluator, tok->get(), &*with_tools, &*plain}, rc, skill_text);

  Corpus c;
  for (const v1::Task& raw : tasks) {
    v1::Task task = raw;
    task.mutable_inputs()->set_device(options.device == "cpu" ? "cpu" : "cuda");
    auto family = fam::ParseTaskSpec(task.reference_source());
    if (!family.ok()) return absl::InvalidArgumentError(absl::StrCat(task.id(), ": ", family.status().message()));
    for (int k = 0; k < per_task; ++k) {
      actor::RolloutOptions ro;
      ro.trajectory_id = absl::StrCat("corpus-", c.records.size());
      auto r = runner.Run(task, ro);
      if (!r.ok()) return r.status();
      if (r->trajectory.stats().stop_reason() != "submitted") {
        return absl::InternalError(absl::StrCat(task.id(), ": the scripted episode ended with ",
                                                r->trajectory.stats().stop_reason(), " ", r->error));
      }
      c.records.push_back(CorpusRecord(r->trajectory, family->family));
      for (const auto& [name, n] : r->tool_calls) c.tool_calls[name] += n;
      for (const auto& [name, n] : r->tool_errors) c.failed_evaluations += name == "Compile" || name == "Verify" ? n : 0;
      for (const v1::Turn& t : r->trajectory.turns()) c.assistant_turns += t.role() == v1::Turn::ASSISTANT;
      c.final_ok += r->trajectory.final_verdict().outcome() == v1::Verdict::OK;
    }
  }
  return c;
}

}  // namespace kernelrl::codemodel
