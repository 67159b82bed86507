#include "common/clock.h"
#include "sandbox/sandbox_service.h"

#include <time.h>

#include "absl/strings/match.h"

namespace kernelrl::sandbox {
namespace {

const grpc::Status kCancelled(grpc::StatusCode::CANCELLED, "the caller went away; the sandbox dropped its job");

}  // namespace

SandboxService::SandboxService(Evaluator* evaluator, MetricsRegistry* metrics)
    : evaluator_(evaluator),
      outcomes_(metrics->AddCounter("kernelrl_sandbox_evaluations_total", "Evaluations by verdict outcome.",
                                    {"outcome"})),
      abandoned_(metrics->AddCounter("kernelrl_sandbox_abandoned_total",
                                     "Requests whose caller went away before their verdict.", {"when"})),
      stage_seconds_(metrics->AddHistogram("kernelrl_sandbox_stage_seconds", "Wall time of each stage.", {"stage"},
                                           {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300})),
      queue_depth_(metrics->AddGauge("kernelrl_sandbox_queue_depth",
                                     "Requests waiting or running, by stage.", {"stage"})),
      serving_(metrics->AddGauge("kernelrl_sandbox_serving", "1 while the GPU health probe passes.")),
      cache_hits_(metrics->AddCounter("kernelrl_sandbox_verdict_cache_hits_total",
                                      "Evaluations served from the verdict cache (SandboxConfig.verdict_cache).")),
      cache_nondeterministic_(metrics->AddGauge(
          "kernelrl_sandbox_verdict_cache_nondeterministic_keys",
          "Candidates (task + workspace bytes) whose fresh verdicts disagreed: always judged afresh.")) {
  metrics->AddCollectHook([this] {
    const EvaluatorInfo info = evaluator_->Info();
    queue_depth_.Labels({"compile_waiting"}).Set(info.compile_waiting);
    queue_depth_.Labels({"compile_running"}).Set(info.compile_in_flight);
    queue_depth_.Labels({"verify_waiting"}).Set(info.verify_waiting);
    serving_.Get().Set(info.serving ? 1 : 0);
    cache_nondeterministic_.Get().Set(static_cast<double>(info.verdict_cache_nondeterministic));
  });
}

bool SandboxService::Record(grpc::ServerContext* context, const v1::Verdict& verdict) {
  if (context->IsCancelled()) {
    // A job dropped at a stage (kCallerGone) saved that stage's GPU time; one run to its end did not.
    const bool dropped = verdict.outcome() == v1::Verdict::INFRA_ERROR &&
                         absl::StartsWith(verdict.summary(), kCallerGone);
    abandoned_.Labels({dropped ? "dropped_before_a_stage" : "after_its_verdict"}).Increment();
    return false;
  }
  outcomes_.Labels({v1::Verdict::Outcome_Name(verdict.outcome())}).Increment();
  if (verdict.cached()) cache_hits_.Get().Increment();
  for (const v1::StageTiming& s : verdict.stages()) stage_seconds_.Labels({s.stage()}).Observe(s.wall_ms() / 1e3);
  return true;
}

grpc::Status SandboxService::Evaluate(grpc::ServerContext* context, const v1::EvaluateRequest* request,
                                      v1::Verdict* verdict) {
  if (!evaluator_->serving()) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "sandbox worker is not serving (GPU health probe failed)");
  }
  *verdict = evaluator_->Evaluate(*request, nullptr, [context] { return context->IsCancelled(); });
  return Record(context, *verdict) ? grpc::Status::OK : kCancelled;
}

grpc::Status SandboxService::EvaluateStream(grpc::ServerContext* context, const v1::EvaluateRequest* request,
                                            grpc::ServerWriter<v1::EvaluateProgress>* writer) {
  if (!evaluator_->serving()) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "sandbox worker is not serving (GPU health probe failed)");
  }
  const double start = MonotonicMs();
  v1::Verdict verdict = evaluator_->Evaluate(*request, [&](const std::string& stage, bool finished,
                                                           const std::string& detail) {
    if (stage == "done") return;  // the final message below carries the verdict
    v1::EvaluateProgress p;
    p.set_stage(stage);
    p.set_finished(finished);
    p.set_elapsed_ms(MonotonicMs() - start);
    p.set_detail(detail);
    writer->Write(p);
  }, [context] { return context->IsCancelled(); });
  if (!Record(context, verdict)) return kCancelled;
  v1::EvaluateProgress last;
  last.set_stage("done");
  last.set_finished(true);
  last.set_elapsed_ms(MonotonicMs() - start);
  *last.mutable_verdict() = verdict;
  writer->Write(last);
  return grpc::Status::OK;
}

}  // namespace kernelrl::sandbox
