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
    auto files = fam::Render(spec, c, device);
    if (!files.ok()) return files.status();
    const std::string& clean = files->at(agent::KernelPathOf(*files));
    if (clean == kernel) return Recognised{c, false, {}};
    const std::vector<std::string> want = Lines(clean);
    if (want.size() != got.size()) continue;
    int diff = -1, n = 0;
    for (size_t i = 0; i < want.size() && n < 2; ++i) {
      if (want[i] != got[i]) diff = static_cast<int>(i), ++n;
    }
    if (n != 1) continue;
    for (const agent::FaultKind& f : agent::Faults()) {
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

Json CorpusRecord(const v1::Trajectory& t, const std::string& family, bool tools_announced) {
  Json messages = Json::array();
  for (const v1::Turn& turn : t.turns()) {
    const char* role = turn.role() == v1::Turn::SYSTEM      ? "system"
                       : turn.role() == v1::Turn::USER      ? "user"
                       : turn.role() == v1::Turn::ASSISTANT ? "assistant"
                                                            : "tool";
    messages.push_back(Json::object({{"role", Json(role)}, {"content", Json(turn.content())}}));
  }
  return Json::object({{"task_id", Json(t.task_id())},
                       {"family", Json(family)},
                       {"reward", Json(t.reward())},
                       {"tools_announced", Json(tools_announced)},
                       {"messages", std::move(messages)}});
}

absl::StatusOr<Corpus> MakeCorpus(const std::vector<v1::Task>& tasks, int per_task, v1::RolloutConfig rc,
                                  const std::string& skill_text, const agent::EngineerPolicyOptions& options, uint64_t seed,
                                  const std::string& workspace_root) {
  // Rollouts record ids; the byte-level tokenizer (no merges) serves until the corpus exists.
  auto bootstrap = agent::TrainBpe({}, agent::BpeTrainerOptions{256, 2});
  if (!bootstrap.ok()) return bootstrap.status();
  auto tok = agent::Tokenizer::FromJson(*bootstrap);
  if (!tok.ok()) return tok.status();
  auto with_tools = agent::ChatFormat::Create(tok->get(), agent::ToolSchemas());
  auto plain = agent::ChatFormat::Create(tok->get(), Json::array());
  if (!with_tools.ok()) return with_tools.status();
  if (!plain.ok()) return plain.status();
  agent::EngineerPolicy agent(tok->get(), plain->im_end_id(), options, seed);
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
      c.records.push_back(CorpusRecord(r->trajectory, family->family, !rc.omit_tool_schemas_from_prompt()));
      c.trajectories.push_back(r->trajectory);
      for (const auto& [name, n] : r->tool_calls) c.tool_calls[name] += n;
      for (const auto& [name, n] : r->tool_errors) c.failed_evaluations += name == "Compile" || name == "Verify" ? n : 0;
      for (const v1::Turn& t : r->trajectory.turns()) c.assistant_turns += t.role() == v1::Turn::ASSISTANT;
      c.final_ok += r->trajectory.final_verdict().outcome() == v1::Verdict::OK;
    }
  }
  return c;
}

}  // namespace kernelrl::codemodel
