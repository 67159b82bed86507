#include "learner/policy/engine_metrics.h"

#include "absl/synchronization/mutex.h"

namespace kernelrl::learner {

struct EngineMetrics::State {
  absl::Mutex mu;
  const PolicyEngine* engine ABSL_GUARDED_BY(mu);
  std::string engine_label;
  Family<Gauge>* blocks_family;
  Gauge* running;
  Gauge* waiting;
  Gauge* hit_rate;
  Counter* prompt_tokens;
  Counter* hit_tokens;
  Counter* prefill_tokens;
  Counter* generated;
  Counter* preemptions;
  Counter* lease_wait;
  PolicyEngine::Info last ABSL_GUARDED_BY(mu) = {};  // Counter values already exported.

  void Collect() {
    absl::MutexLock lock(&mu);
    if (engine == nullptr) return;
    const PolicyEngine::Info now = engine->GetInfo();
    blocks_family->Labels({engine_label, "used"}).Set(static_cast<double>(now.kv_blocks_used));
    blocks_family->Labels({engine_label, "cached"}).Set(static_cast<double>(now.kv_blocks_cached));
    blocks_family->Labels({engine_label, "free"})
        .Set(static_cast<double>(now.kv_blocks_total - now.kv_blocks_used - now.kv_blocks_cached));
    running->Set(now.running);
    waiting->Set(now.active - now.running + now.queued);
    hit_rate->Set(now.prompt_tokens > 0 ? static_cast<double>(now.prefix_hit_tokens) / now.prompt_tokens : 0.0);
    prompt_tokens->Increment(static_cast<double>(now.prompt_tokens - last.prompt_tokens));
    hit_tokens->Increment(static_cast<double>(now.prefix_hit_tokens - last.prefix_hit_tokens));
    prefill_tokens->Increment(static_cast<double>(now.prefill_tokens - last.prefill_tokens));
    generated->Increment(static_cast<double>(now.tokens_generated - last.tokens_generated));
    preemptions->Increment(static_cast<double>(now.preemptions - last.preemptions));
    lease_wait->Increment(now.gpu_lease_wait_s - last.gpu_lease_wait_s);
    last = now;
  }
};

EngineMetrics::EngineMetrics(const PolicyEngine* engine, MetricsRegistry* r, const std::string& engine_label)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.engine_label = engine_label;
  const std::vector<std::string> label = {engine_label};
  {
    absl::MutexLock lock(&s.mu);
    s.engine = engine;
  }
  s.blocks_family = &r->AddGauge("kernelrl_policy_kv_blocks",
                                 "KV-cache blocks of the policy engine by state: used (referenced by a sequence), "
                                 "cached (a reusable prefix, evictable), free.",
                                 {"engine", "state"});
  s.running = &r->AddGauge("kernelrl_policy_running_sequences", "Sequences in the engine's running batch.", {"engine"}).Labels(label);
  s.waiting = &r->AddGauge("kernelrl_policy_waiting_requests",
                           "Requests not running: queued, waiting for KV blocks, or preempted.", {"engine"})
                   .Labels(label);
  s.hit_rate = &r->AddGauge("kernelrl_policy_prefix_hit_rate",
                            "Prompt tokens found in the prefix cache / prompt tokens admitted, since start.", {"engine"})
                    .Labels(label);
  s.prompt_tokens = &r->AddCounter("kernelrl_policy_prompt_tokens_total",
                                   "Prompt tokens admitted (a preempted request's recomputation counts again).", {"engine"})
                         .Labels(label);
  s.hit_tokens =
      &r->AddCounter("kernelrl_policy_prefix_hit_tokens_total", "Admitted prompt tokens found in the prefix cache.", {"engine"})
           .Labels(label);
  s.prefill_tokens =
      &r->AddCounter("kernelrl_policy_prefill_tokens_total", "Prompt tokens computed by prefill.", {"engine"}).Labels(label);
  s.generated = &r->AddCounter("kernelrl_policy_generated_tokens_total", "Tokens sampled.", {"engine"}).Labels(label);
  s.preemptions = &r->AddCounter("kernelrl_policy_preemptions_total",
                                 "Running sequences preempted for KV blocks (recomputed later).", {"engine"})
                       .Labels(label);
  s.lease_wait = &r->AddCounter("kernelrl_policy_gpu_lease_wait_seconds_total",
                                "Seconds the engine's steps waited for the GPU lease while a sandbox worker timed "
                                "a candidate on the same GPU (0 without a lease).",
                                {"engine"})
                      .Labels(label);
  std::weak_ptr<State> weak = state_;
  r->AddCollectHook([weak] {
    if (auto state = weak.lock()) state->Collect();
  });
}

EngineMetrics::~EngineMetrics() {
  absl::MutexLock lock(&state_->mu);
  state_->engine = nullptr;
}

}  // namespace kernelrl::learner
