#include "profiler_service/profiler_service.h"

namespace kernelrl {

grpc::Status ProfilerServiceImpl::Profile(grpc::ServerContext*, const v1::ProfileRequest* request,
                                          v1::ProfileResult* response) {
  absl::StatusOr<ProfileResult> r = core_->Profile(*request);
  if (!r.ok()) return grpc::Status(static_cast<grpc::StatusCode>(r.status().code()), std::string(r.status().message()));
  *response = *std::move(r);
  return grpc::Status::OK;
}

grpc::Status ProfilerServiceImpl::Baselines(grpc::ServerContext*, const v1::BaselinesRequest* request,
                                            v1::BaselinesResponse* response) {
  *response = core_->Baselines(*request);
  return grpc::Status::OK;
}

}  // namespace kernelrl
