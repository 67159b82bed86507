#include "sandbox/profile_stage.h"

#include <time.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/file.h"
#include "google/protobuf/util/json_util.h"
#include "profiler_service/baseline_cache.h"
#include "profiler_service/judge.h"
#include "profiler_service/timing_analysis.h"
#include "profiler_service/profiler_defaults.h"
#include "profiler_service/task_key.h"
#include "sandbox/verdict_text.h"

namespace kernelrl::sandbox {
namespace {


absl::StatusOr<v1::ProfileMeasurement> ReadMeasurement(const std::string& path) {
  if (path.empty()) return absl::NotFoundError("the candidate process wrote no measurement");
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  v1::ProfileMeasurement m;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;  // the harness writes exactly the proto; anything else is drift
  if (auto s = google::protobuf::util::JsonStringToMessage(*text, &m, opts); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("measurement does not parse: ", s.ToString()));
  }
  return m;
}

void SetOutcome(Verdict& v, Verdict::Outcome outcome, const std::string& summary) {
  v.set_outcome(outcome);
  v.set_summary(summary.substr(0, 1000));
}

}  // namespace

absl::StatusOr<v1::RawTimingRun> ProfileStage::CandidateRun(const v1::sandbox::HarnessProfile& profile) const {
  if (!profile.ok()) {
    return absl::FailedPreconditionError("profile phase failed: " + profile.error() + " " + profile.detail());
  }
  absl::StatusOr<v1::ProfileMeasurement> m = ReadMeasurement(profile.measurement_file());
  if (!m.ok()) return m.status();
  return m->candidate();
}

absl::StatusOr<v1::ProfileMeasurement> ProfileStage::Measurement(const v1::sandbox::HarnessProfile& p,
                                                                  const DeviceFacts& facts) const {
  if (!p.started()) return absl::FailedPreconditionError("profile phase did not start");
  absl::StatusOr<v1::ProfileMeasurement> m = ReadMeasurement(p.measurement_file());
  if (!m.ok()) {
    return absl::Status(m.status().code(), absl::StrCat(m.status().message(), " ", p.error(), " ", p.detail()));
  }
  m->mutable_device()->set_gpu_model(facts.gpu_model);
  m->mutable_device()->set_torch_version(facts.torch_version);
  m->mutable_device()->set_backend(facts.device);
  m->mutable_candidate()->set_backend(facts.device);
  m->mutable_anchor()->set_backend(facts.device);
  if (!facts.cupti_injected) m->mutable_candidate()->set_cupti_active(false);
  return m;
}

ProfileStage::ProfileStage(const v1::ProfilerConfig& config, std::string baseline_dir)
    : config_(WithProfilerDefaults(config)), baseline_dir_(std::move(baseline_dir)) {}

void ProfileStage::Judge(const v1::sandbox::HarnessProfile& p, const Task& task, const DeviceFacts& facts,
                         Verdict& v) const {
  const double t0 = MonotonicMs();
  const std::string verify_summary = v.summary();
  auto finish = [&] {
    StageTiming* st = v.add_stages();
    st->set_stage("profile");
    st->set_wall_ms(p.wall_ms() + (MonotonicMs() - t0));
  };
  if (!p.started()) {
    SetOutcome(v, Verdict::INFRA_ERROR, "profile phase did not start (profiler harness unavailable on this worker)");
    return finish();
  }
  if (!p.ok() && absl::StartsWith(p.error(), "harness")) {
    SetOutcome(v, Verdict::INFRA_ERROR, "profile: " + p.error());
    return finish();
  }
  absl::StatusOr<v1::ProfileMeasurement> m = ReadMeasurement(p.measurement_file());
  if (!m.ok()) {
    SetOutcome(v, Verdict::INFRA_ERROR, absl::StrCat("profile: ", m.status().message(), " ", p.detail()));
    return finish();
  }
  // What the candidate process said about the device and the work is not used
  // to pick the baseline or the floor.
  m->clear_work();
  m->mutable_device()->set_gpu_model(facts.gpu_model);
  m->mutable_device()->set_torch_version(facts.torch_version);
  m->mutable_device()->set_backend(facts.device);
  m->mutable_candidate()->set_backend(facts.device);
  m->mutable_anchor()->set_backend(facts.device);
  const bool cupti_claimed = m->candidate().cupti_active();
  if (!facts.cupti_injected) m->mutable_candidate()->set_cupti_active(false);
  const BaselineKey key = BaselineKeyFor(task, facts.device, facts.gpu_model, facts.torch_version, facts.tf32);
  m->set_input_policy_hash(key.input_policy_hash);

  const BaselineCache cache(baseline_dir_);
  absl::StatusOr<v1::Baseline> baseline = cache.Get(key);
  const std::string missing =
      baseline.ok() ? WhyBaselineDoesNotPay(*baseline) : std::string(baseline.status().message());
  const v1::ProfileResult judged = JudgeProfile(*m, missing.empty() ? &*baseline : nullptr, task, config_);
  const Verdict& j = judged.verdict();
  {
    const v1::CallSample* eager = nullptr;
    const v1::CallSample* graph = nullptr;
    for (const v1::CallSample& s : m->candidate().samples()) (s.graph() ? graph : eager) = &s;
    const int graph_blocks = judged.candidate().graph_samples();
    std::string graph_line;
    if (graph != nullptr) {
      graph_line = absl::StrFormat("graph-replayed: %.2f us per forward (median of %d blocks of %d forwards); ",
                                   j.candidate_graph_time_us(), graph_blocks, graph->forwards());
    }
    if (!m->candidate().graph_note().empty()) graph_line += "graph: " + m->candidate().graph_note() + "; ";
    (*v.mutable_logs())["profile"] = absl::StrFormat(
        "trusted: %.2f us per forward (median of %d blocks of %d forwards, copies %.2f us taken off each); %s"
        "in-process (attribution): %.2f us; %d forwards compared; drift anchor %.1f us now, %.1f us at baseline; "
        "baseline timed %s",
        j.candidate_time_us(), m->candidate().samples_size() - graph_blocks, eager ? eager->forwards() : 0,
        eager ? eager->copies_us() : 0.0, graph_line, judged.candidate().in_process_median_us(), p.rechecks(),
        m->anchor().samples_size() > 0 ? AnalyzeTimingRun(m->anchor(), config_).median_us() : 0.0,
        baseline.ok() ? baseline->anchor_median_us() : 0.0,
        !baseline.ok() ? "(none)" : ("through the " + baseline->timing_path() + " path").c_str());
    for (const auto& [kind, s] : {std::pair{"eager", eager}, std::pair{"graph", graph}}) {
      if (s == nullptr) continue;
      absl::StrAppendFormat(&(*v.mutable_logs())["profile"],
                            "; last %s block: inputs in %.0f us, forwards to done %.0f us (executor's own "
                            "wall %.0f us; it saw go after %.0f us, we saw done after %.0f us), locate %.0f us "
                            "(%d segments mapped), seal %.0f us%s",
                            kind, s->inputs_us(), s->forwards_us(), s->wall_us() * s->forwards(), s->go_wake_us(),
                            s->done_read_us(), s->locate_us(), s->segments_mapped_in_clock(), s->seal_us(),
                            s->seal_gpu_us() <= 0.0
                                ? ""
                                : absl::StrFormat(" (GPU: inputs %.0f us, seal %.0f us; %.2f us a forward taken "
                                                  "off for the seal)",
                                                  s->inputs_gpu_us(), s->seal_gpu_us(), s->seal_off_us())
                                      .c_str());
    }
    // Every block's figure in order (the first 24): a block unlike its neighbours shows here.
    std::string blocks;
    int shown = 0;
    for (const v1::CallSample& s : m->candidate().samples()) {
      if (shown++ == 24) {
        absl::StrAppend(&blocks, " ...");
        break;
      }
      absl::StrAppendFormat(&blocks, "%s%s%.1f", blocks.empty() ? "" : " ", s.graph() ? "g" : "e", s.trusted_us());
    }
    // The speed-ups' figures: both sides' copies at the faster worker's rates (judge.h).
    const CopyOffsets off = baseline.ok() ? CommonCopyOffsets(judged.candidate().copies(), baseline->eager().copies())
                                          : CopyOffsets{};
    if (off.candidate_us != 0.0 || off.baseline_us != 0.0) {
      absl::StrAppendFormat(&(*v.mutable_logs())["profile"],
                            "; speed-ups with our copies at common rates: %+.2f us on ours, %+.2f us on eager's",
                            off.candidate_us, off.baseline_us);
    }
    if (!blocks.empty()) {
      absl::StrAppend(&(*v.mutable_logs())["profile"], "; blocks (trusted us a forward; e eager, g graph): ", blocks);
    }
    if (!m->candidate().gpu_share_check().empty()) {
      absl::StrAppendFormat(&(*v.mutable_logs())["profile"], "; gpu share %s (%d other processes busy)",
                            m->candidate().gpu_share_check(), m->candidate().foreign_gpu_processes());
    }
  }

  v.set_candidate_time_us(j.candidate_time_us());
  v.set_eager_time_us(j.eager_time_us());
  v.set_compile_time_us(j.compile_time_us());
  v.set_speedup_vs_eager(j.speedup_vs_eager());
  v.set_speedup_vs_compile(j.speedup_vs_compile());
  v.set_candidate_graph_time_us(j.candidate_graph_time_us());
  v.set_eager_graph_time_us(j.eager_graph_time_us());
  v.set_compile_graph_time_us(j.compile_graph_time_us());
  v.set_speedup_vs_eager_graph(j.speedup_vs_eager_graph());
  v.set_speedup_vs_compile_graph(j.speedup_vs_compile_graph());
  if (j.has_eager_basis()) *v.mutable_eager_basis() = j.eager_basis();
  if (j.has_compile_basis()) *v.mutable_compile_basis() = j.compile_basis();
  v.set_speed_of_light_ratio(j.speed_of_light_ratio());
  *v.mutable_coverage() = j.coverage();
  for (const std::string& f : j.flags()) v.add_flags(f);
  v.set_quarantined(j.quarantined());

  if (facts.cupti_injected && !cupti_claimed) {
    v.add_flags("cupti_claim_mismatch");
    v.set_quarantined(false);
    SetOutcome(v, Verdict::HACK_DETECTED,
               "profile: the measurement says CUPTI was inactive in a process the worker started with the "
               "recorder (evidence edited; integrity checks would have been skipped)");
    return finish();
  }
  if (m->candidate().rechecks() != p.rechecks()) {
    v.add_flags("recheck_count_mismatch");
    v.set_quarantined(false);
    SetOutcome(v, Verdict::HACK_DETECTED,
               absl::StrFormat("profile: the measurement reports %d re-checks, the reference process answered %d "
                               "(evidence edited)", m->candidate().rechecks(), p.rechecks()));
    return finish();
  }
  if (j.outcome() != Verdict::OK) {
    SetOutcome(v, j.outcome(), "profile: " + j.summary());
    return finish();
  }
  std::string summary = WithProfile(verify_summary, j.summary());
  if (!missing.empty()) {
    // Documented rule: correct but not benchmarked earns 1, never a guessed speed-up.
    summary = absl::StrFormat(
        "%s; profile: %.1f us, baseline missing for task hash %s on '%s' torch %s (%s): %s; reward 1 "
        "(correct, not benchmarked)",
        verify_summary, j.candidate_time_us(), key.task_hash.substr(0, 12), key.gpu_model, key.torch_version,
        key.input_policy_hash, missing.substr(0, 160));
  } else if (baseline->compiled().median_us() <= 0) {
    v.add_flags("compile_baseline_missing");
    summary += " (no torch.compile baseline: not counted as beaten)";
  }
  SetOutcome(v, Verdict::OK, summary);
  finish();
}

}  // namespace kernelrl::sandbox
