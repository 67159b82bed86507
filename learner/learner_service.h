// kernelrl.v1.Learner over gRPC: a thin adapter over rl::JobManager
// (learner/rl/jobs.h), where jobs, leases and the trajectory buffer live.
#ifndef KERNELRL_LEARNER_LEARNER_SERVICE_H_
#define KERNELRL_LEARNER_LEARNER_SERVICE_H_

#include "learner/rl/jobs.h"
#include "proto/learner.grpc.pb.h"

namespace kernelrl::learner {

class LearnerService final : public v1::Learner::Service {
 public:
  explicit LearnerService(rl::JobManager* jobs) : jobs_(jobs) {}

  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* request, v1::Job* response) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* request, v1::Job* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                        grpc::ServerWriter<v1::Job>* writer) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* request, v1::Job* response) override;
  grpc::Status PauseJob(grpc::ServerContext*, const v1::PauseJobRequest* request, v1::Job* response) override;
  grpc::Status ResumeJob(grpc::ServerContext*, const v1::ResumeJobRequest* request, v1::Job* response) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status LeaseTasks(grpc::ServerContext*, const v1::LeaseTasksRequest* request,
                          v1::LeaseTasksResponse* response) override;
  grpc::Status PushTrajectories(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::PushTrajectoriesAck, v1::PushTrajectoriesRequest>* stream) override;

 private:
  rl::JobManager* jobs_;
};

}  // namespace kernelrl::learner

#endif  // KERNELRL_LEARNER_LEARNER_SERVICE_H_
