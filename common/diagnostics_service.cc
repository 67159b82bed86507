#include "common/diagnostics_service.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace kernelrl {

namespace {
constexpr int kMaxDelayMs = 60000;
}

DiagnosticsService::DiagnosticsService(std::string service_name)
    : service_name_(std::move(service_name)), started_(absl::Now()) {}

grpc::Status DiagnosticsService::Ping(grpc::ServerContext* context, const kernelrl::v1::PingRequest* request,
                                      kernelrl::v1::PingResponse* response) {
  if (request->delay_ms() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "delay_ms must be >= 0");
  }
  const absl::Time until = absl::Now() + absl::Milliseconds(std::min(request->delay_ms(), kMaxDelayMs));
  while (absl::Now() < until) {
    if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled");
    absl::SleepFor(std::min(absl::Milliseconds(10), until - absl::Now()));
  }
  response->set_payload(request->payload());
  response->set_service(service_name_);
  response->set_uptime_ms(absl::ToInt64Milliseconds(absl::Now() - started_));
  return grpc::Status::OK;
}

}  // namespace kernelrl
