#include "actor/sandbox_pool.h"

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/grpc_channel.h"
#include "common/log.h"

namespace kernelrl::actor {
namespace {

bool Retryable(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::UNKNOWN:
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<SandboxPool>> SandboxPool::Create(const v1::SandboxPoolConfig& config) {
  if (config.target().empty()) return absl::InvalidArgumentError("sandbox.target is empty");
  if (config.deadline_seconds() <= 0) return absl::InvalidArgumentError("sandbox.deadline_seconds must be > 0");
  auto channel = RoundRobinChannel(config.target(), config.health_check());
  return std::unique_ptr<SandboxPool>(new SandboxPool(config, std::move(channel)));
}

SandboxPool::SandboxPool(v1::SandboxPoolConfig config, std::shared_ptr<grpc::Channel> channel)
    : config_(std::move(config)), channel_(std::move(channel)), stub_(v1::Sandbox::NewStub(channel_)) {}

v1::Verdict SandboxPool::Evaluate(const v1::EvaluateRequest& request) {
  std::string last_error;
  const int attempts = 1 + std::max(0, config_.retries());
  for (int i = 0; i < attempts; ++i) {
    // A short pause before a retry lets the channel see a failed worker go
    // down (and others connect), so round_robin picks a different one.
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100 * i));
    ++attempts_;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(config_.deadline_seconds() * 1000)));
    // Queue while no worker is ready (all busy restarting or NOT_SERVING), up to the deadline.
    ctx.set_wait_for_ready(true);
    v1::Verdict verdict;
    grpc::Status s = stub_->Evaluate(&ctx, request, &verdict);
    if (s.ok() && verdict.outcome() != v1::Verdict::INFRA_ERROR) return verdict;
    if (s.ok()) {
      last_error = absl::StrCat("worker ", verdict.worker_id(), " reported INFRA_ERROR: ", verdict.summary());
    } else {
      last_error = absl::StrCat("Evaluate failed: ", s.error_code(), " ", s.error_message(), " (", ctx.peer(), ")");
      if (!Retryable(s.error_code())) break;
    }
    KLOG(WARNING) << "sandbox pool: " << request.request_id() << " attempt " << i + 1 << "/" << attempts << ": "
                  << last_error;
  }
  v1::Verdict v;
  v.set_outcome(v1::Verdict::INFRA_ERROR);
  v.set_summary(absl::StrCat("sandbox pool: ", last_error));  // reward 0, never trained on (IsTrainingSample)
  return v;
}

}  // namespace kernelrl::actor
