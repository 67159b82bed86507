#include "profiler_service/profiler_service.h"

namespace kernelrl {

grpc::Status ProfilerServiceImpl::Baselines(grpc::ServerContext*, const v1::BaselinesRequest* request,
                                            v1::BaselinesResponse* response) {
  // Per-task failures travel in response.missing; the call itself succeeds.
  *response = core_->Baselines(*request);
  return grpc::Status::OK;
}

}  // namespace kernelrl
