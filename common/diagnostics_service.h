// kernelrl.v1.Diagnostics: Ping with an optional server-side delay. Operators
// use it as a latency probe; tests use the delay to hold a call open across a
// shutdown. The delay is capped and ends early if the client cancels.
#ifndef KERNELRL_COMMON_DIAGNOSTICS_SERVICE_H_
#define KERNELRL_COMMON_DIAGNOSTICS_SERVICE_H_

#include <string>

#include "absl/time/time.h"
#include "proto/diagnostics.grpc.pb.h"

namespace kernelrl {

class DiagnosticsService final : public kernelrl::v1::Diagnostics::Service {
 public:
  explicit DiagnosticsService(std::string service_name);

  grpc::Status Ping(grpc::ServerContext* context, const kernelrl::v1::PingRequest* request,
                    kernelrl::v1::PingResponse* response) override;

 private:
  const std::string service_name_;
  const absl::Time started_;
};

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_DIAGNOSTICS_SERVICE_H_
