#include "actor/actor.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace kernelrl::actor {
namespace {

void SleepFor(double seconds, const std::atomic<bool>& stop) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  while (!stop.load() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

Actor::Actor(const RolloutRunner* runner, LearnerClient* learner, v1::ActorConfig config, MetricsRegistry* metrics)
    : runner_(runner),
      learner_(learner),
      config_(std::move(config)),
      rollouts_(metrics->AddCounter("kernelrl_actor_rollouts_total", "Finished rollouts by stop reason.", {"stop_reason"})),
      rollout_seconds_(metrics->AddHistogram("kernelrl_actor_rollout_seconds", "Wall time of a rollout.", {},
                                             ExponentialBuckets(1, 2, 14))),
      turns_(metrics->AddHistogram("kernelrl_actor_turns_per_rollout", "Assistant turns per rollout.", {},
                                   ExponentialBuckets(1, 2, 9))),
      policy_seconds_(metrics->AddHistogram("kernelrl_actor_policy_seconds", "Policy time per rollout.", {},
                                            ExponentialBuckets(0.1, 2, 16))),
      sandbox_seconds_(metrics->AddHistogram("kernelrl_actor_sandbox_seconds", "Sandbox time per rollout.", {},
                                             ExponentialBuckets(0.1, 2, 16))),
      tool_calls_(metrics->AddCounter("kernelrl_actor_tool_calls_total", "Tool calls by tool.", {"tool"})),
      tool_errors_(metrics->AddCounter("kernelrl_actor_tool_errors_total", "Tool calls that failed, by tool.", {"tool"})),
      outcomes_(metrics->AddCounter("kernelrl_actor_outcomes_total", "Final verdict outcome of rollouts.", {"outcome"})),
      pushes_(metrics->AddCounter("kernelrl_actor_pushes_total", "Pushed trajectories by result.", {"result"})) {}

Actor::~Actor() { Stop(); }

void Actor::Start() {
  for (int i = 0; i < std::max(1, config_.concurrent_rollouts()); ++i) threads_.emplace_back([this, i] { Work(i); });
}

void Actor::StopLeasing() { stop_ = true; }

void Actor::Stop() {
  stop_ = true;
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

void Actor::Work(int index) {
  const double backoff = config_.learner().lease_backoff_seconds() > 0 ? config_.learner().lease_backoff_seconds() : 2;
  int64_t n = 0;
  while (!stop_.load()) {
    absl::StatusOr<std::vector<v1::TaskLease>> leases = learner_->Lease(1);
    if (!leases.ok() || leases->empty()) {
      if (!leases.ok()) {
        KLOG(WARNING) << "actor: " << leases.status();
      }
      SleepFor(backoff, stop_);
      continue;
    }
    const v1::TaskLease& lease = leases->front();
    RolloutOptions opts;
    opts.trajectory_id = absl::StrCat(lease.lease_id(), "/", config_.actor_id(), "/", index, "-", n++);
    opts.job_id = lease.job_id();
    opts.seed = lease.seed();
    absl::StatusOr<RolloutResult> r = runner_->Run(lease.task(), opts);
    if (!r.ok()) {
      KLOG(ERROR) << "actor: rollout of " << lease.task().id() << ": " << r.status();
      rollouts_.Labels({"error"}).Increment();
      continue;  // The lease expires; the learner hands the task out again.
    }
    const v1::Trajectory& t = r->trajectory;
    rollouts_.Labels({t.stats().stop_reason()}).Increment();
    rollout_seconds_.Get().Observe(r->wall_seconds);
    int assistant = 0;
    for (const v1::Turn& turn : t.turns()) assistant += turn.role() == v1::Turn::ASSISTANT;
    turns_.Get().Observe(assistant);
    policy_seconds_.Get().Observe(r->policy_seconds);
    sandbox_seconds_.Get().Observe(r->sandbox_seconds);
    for (const auto& [tool, k] : r->tool_calls) tool_calls_.Labels({tool}).Increment(k);
    for (const auto& [tool, k] : r->tool_errors) tool_errors_.Labels({tool}).Increment(k);
    outcomes_.Labels({v1::Verdict::Outcome_Name(t.final_verdict().outcome())}).Increment();
    v1::PushTrajectoriesRequest req;
    req.set_lease_id(lease.lease_id());
    *req.mutable_trajectory() = t;
    absl::StatusOr<std::vector<v1::PushTrajectoriesAck>> acks = learner_->Push({req});
    if (!acks.ok()) {
      KLOG(ERROR) << "actor: push of " << t.id() << " failed: " << acks.status();
      pushes_.Labels({"failed"}).Increment();
    } else {
      pushes_.Labels({acks->front().accepted() ? "accepted" : "rejected"}).Increment();
      if (!acks->front().accepted()) {
        KLOG(INFO) << "actor: " << t.id() << " rejected: " << acks->front().reason();
      }
    }
  }
}

}  // namespace kernelrl::actor
