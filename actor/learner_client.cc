#include "actor/learner_client.h"

#include <chrono>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status_util.h"

namespace kernelrl::actor {
namespace {

std::chrono::system_clock::time_point Deadline(double seconds) {
  return std::chrono::system_clock::now() +
         std::chrono::milliseconds(static_cast<int64_t>((seconds > 0 ? seconds : 30) * 1000));
}

}  // namespace

LearnerClient::LearnerClient(std::shared_ptr<grpc::Channel> channel, v1::LearnerClientConfig config,
                             std::string actor_id)
    : stub_(v1::Learner::NewStub(std::move(channel))), config_(std::move(config)), actor_id_(std::move(actor_id)) {}

absl::StatusOr<std::vector<v1::TaskLease>> LearnerClient::Lease(int max_tasks) {
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(config_.rpc_timeout_seconds()));
  v1::LeaseTasksRequest req;
  req.set_actor_id(actor_id_);
  req.set_max_tasks(max_tasks);
  v1::LeaseTasksResponse resp;
  grpc::Status s = stub_->LeaseTasks(&ctx, req, &resp);
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("LeaseTasks: ", s.error_message()));
  return std::vector<v1::TaskLease>(resp.leases().begin(), resp.leases().end());
}

absl::StatusOr<std::vector<v1::PushTrajectoriesAck>> LearnerClient::Push(
    const std::vector<v1::PushTrajectoriesRequest>& batch, int attempts) {
  std::map<std::string, v1::PushTrajectoriesAck> acked;
  std::string last_error;
  for (int attempt = 0; attempt < attempts && acked.size() < batch.size(); ++attempt) {
    if (attempt > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(
          static_cast<int64_t>(1000 * (config_.reconnect_backoff_seconds() > 0 ? config_.reconnect_backoff_seconds() : 0.5))));
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(config_.rpc_timeout_seconds()));
    auto stream = stub_->PushTrajectories(&ctx);
    std::vector<std::string> sent;
    for (const v1::PushTrajectoriesRequest& r : batch) {
      if (acked.count(r.trajectory().id())) continue;
      if (!stream->Write(r)) break;
      sent.push_back(r.trajectory().id());
    }
    stream->WritesDone();
    v1::PushTrajectoriesAck ack;
    while (stream->Read(&ack)) acked[ack.trajectory_id()] = ack;
    grpc::Status s = stream->Finish();
    if (!s.ok()) last_error = absl::StrCat("PushTrajectories: ", s.error_message());
  }
  if (acked.size() < batch.size()) {
    return absl::UnavailableError(absl::StrCat(batch.size() - acked.size(), " trajectories not acked: ", last_error));
  }
  std::vector<v1::PushTrajectoriesAck> out;
  for (const v1::PushTrajectoriesRequest& r : batch) out.push_back(acked[r.trajectory().id()]);
  return out;
}

}  // namespace kernelrl::actor
