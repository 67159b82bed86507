// The thin gRPC adapter of kernelrl.v1.Profiler over ProfilerCore.
#ifndef KERNELRL_PROFILER_SERVICE_PROFILER_SERVICE_H_
#define KERNELRL_PROFILER_SERVICE_PROFILER_SERVICE_H_

#include "profiler_service/profiler_core.h"
#include "proto/profiler.grpc.pb.h"

namespace kernelrl {

class ProfilerServiceImpl final : public v1::Profiler::Service {
 public:
  explicit ProfilerServiceImpl(ProfilerCore* core) : core_(core) {}

  grpc::Status Baselines(grpc::ServerContext*, const v1::BaselinesRequest* request,
                         v1::BaselinesResponse* response) override;

 private:
  ProfilerCore* core_;
};

}  // namespace kernelrl

#endif  // KERNELRL_PROFILER_SERVICE_PROFILER_SERVICE_H_
