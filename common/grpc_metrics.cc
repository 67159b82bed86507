#include "common/grpc_metrics.h"

#include <vector>

#include "absl/time/clock.h"

namespace kernelrl {

namespace {
using grpc::experimental::InterceptionHookPoints;

const char* CodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                                       "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
                                       "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  const int index = static_cast<int>(code);
  return index >= 0 && index < 17 ? kNames[index] : "UNKNOWN";
}

struct GrpcMetrics {
  Family<Counter>* handled;
  Family<Histogram>* latency;
  Gauge* in_flight;
  std::string service;
};

class MetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(const GrpcMetrics* metrics, std::string method)
      : metrics_(metrics), method_(std::move(method)), start_(absl::Now()) {
    metrics_->in_flight->Add(1);
  }
  ~MetricsInterceptor() override {
    metrics_->in_flight->Add(-1);
    metrics_->handled->Labels({metrics_->service, method_, code_}).Increment();
    metrics_->latency->Labels({metrics_->service, method_}).Observe(absl::ToDoubleSeconds(absl::Now() - start_));
  }
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      code_ = CodeName(methods->GetSendStatus().error_code());
    }
    methods->Proceed();
  }

 private:
  const GrpcMetrics* metrics_;
  const std::string method_;
  const absl::Time start_;
  std::string code_ = "CANCELLED";  // No status sent: the call was cut off.
};

class MetricsInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MetricsInterceptorFactory(GrpcMetrics metrics) : metrics_(std::move(metrics)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    return new MetricsInterceptor(&metrics_, info->method());
  }

 private:
  const GrpcMetrics metrics_;
};
}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeGrpcMetricsInterceptorFactory(
    const std::string& service_name, MetricsRegistry* metrics) {
  GrpcMetrics m;
  m.service = service_name;
  m.handled = &metrics->AddCounter("kernelrl_grpc_server_handled_total", "RPCs completed, by method and status code.",
                                   {"service", "method", "code"});
  m.latency = &metrics->AddHistogram("kernelrl_grpc_server_handling_seconds", "RPC handling time.",
                                     {"service", "method"}, ExponentialBuckets(0.001, 4, 10));
  m.in_flight = &metrics->AddGauge("kernelrl_grpc_server_in_flight", "RPCs being handled now.", {"service"})
                     .Labels({service_name});
  return std::make_unique<MetricsInterceptorFactory>(std::move(m));
}

}  // namespace kernelrl
