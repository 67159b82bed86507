#include "learner/learner_service.h"

#include "common/grpc_status.h"

namespace kernelrl::learner {

grpc::Status LearnerService::SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* request,
                                       v1::Job* response) {
  auto job = jobs_->Submit(request->spec());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status LearnerService::GetJob(grpc::ServerContext*, const v1::GetJobRequest* request, v1::Job* response) {
  auto job = jobs_->Get(request->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status LearnerService::WatchJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                                      grpc::ServerWriter<v1::Job>* writer) {
  int64_t revision = -1;
  while (!context->IsCancelled()) {
    v1::Job job;
    auto changed = jobs_->WaitForChange(request->job_id(), &revision, absl::Milliseconds(500), &job);
    if (!changed.ok()) return ToGrpcStatus(changed.status());
    if (!*changed) continue;
    if (!writer->Write(job)) return grpc::Status::OK;  // The client went away.
    if (rl::JobManager::Finished(job.state())) return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled");
}

grpc::Status LearnerService::CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* request,
                                       v1::Job* response) {
  auto job = jobs_->Cancel(request->job_id(), request->reason());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status LearnerService::PauseJob(grpc::ServerContext*, const v1::PauseJobRequest* request,
                                      v1::Job* response) {
  auto job = jobs_->Pause(request->job_id(), request->reason());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status LearnerService::ResumeJob(grpc::ServerContext*, const v1::ResumeJobRequest* request,
                                       v1::Job* response) {
  auto job = jobs_->Resume(request->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status LearnerService::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* request,
                                      v1::ListJobsResponse* response) {
  auto list = jobs_->List(request->page_size(), request->page_token());
  if (!list.ok()) return ToGrpcStatus(list.status());
  *response = std::move(*list);
  return grpc::Status::OK;
}

grpc::Status LearnerService::LeaseTasks(grpc::ServerContext*, const v1::LeaseTasksRequest* request,
                                        v1::LeaseTasksResponse* response) {
  auto leases = jobs_->LeaseTasks(*request);
  if (!leases.ok()) return ToGrpcStatus(leases.status());
  *response = std::move(*leases);
  return grpc::Status::OK;
}

grpc::Status LearnerService::PushTrajectories(
    grpc::ServerContext*, grpc::ServerReaderWriter<v1::PushTrajectoriesAck, v1::PushTrajectoriesRequest>* stream) {
  v1::PushTrajectoriesRequest request;
  while (stream->Read(&request)) {
    // One ack per trajectory, in order, written once the trajectory is durable.
    if (!stream->Write(jobs_->Push(request))) break;
  }
  return grpc::Status::OK;
}

}  // namespace kernelrl::learner
