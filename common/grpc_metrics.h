// Per-RPC Prometheus metrics for every gRPC server, as a server interceptor:
//   kernelrl_grpc_server_handled_total{service,method,code}
//   kernelrl_grpc_server_handling_seconds{service,method} (histogram)
//   kernelrl_grpc_server_in_flight{service}
#ifndef KERNELRL_COMMON_GRPC_METRICS_H_
#define KERNELRL_COMMON_GRPC_METRICS_H_

#include <memory>
#include <string>

#include "common/metrics.h"
#include "grpcpp/support/server_interceptor.h"

namespace kernelrl {

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeGrpcMetricsInterceptorFactory(
    const std::string& service_name, MetricsRegistry* metrics);

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_GRPC_METRICS_H_
