// SandboxService: the gRPC face of the Evaluator (kernelrl.v1.Sandbox). Thin
// by design: it converts calls, streams stage progress, and records metrics
// (outcomes, stage latencies, queue depth, serving); every decision lives in
// the Evaluator. Thread-safe: gRPC calls it concurrently; the Evaluator
// serialises the GPU stage itself.
#ifndef KERNELRL_SANDBOX_SANDBOX_SERVICE_H_
#define KERNELRL_SANDBOX_SANDBOX_SERVICE_H_

#include "common/metrics.h"
#include "grpcpp/grpcpp.h"
#include "proto/sandbox.grpc.pb.h"
#include "sandbox/evaluator.h"

namespace kernelrl::sandbox {

class SandboxService final : public v1::Sandbox::Service {
 public:
  // `evaluator` and `metrics` must outlive the service.
  SandboxService(Evaluator* evaluator, MetricsRegistry* metrics);

  grpc::Status Evaluate(grpc::ServerContext* context, const v1::EvaluateRequest* request,
                        v1::Verdict* verdict) override;
  grpc::Status EvaluateStream(grpc::ServerContext* context, const v1::EvaluateRequest* request,
                              grpc::ServerWriter<v1::EvaluateProgress>* writer) override;

 private:
  // Records a finished verdict; false (nothing recorded) when its caller went away before it
  // was done: the call ends CANCELLED, and no outcome counts a job its caller cut short.
  bool Record(grpc::ServerContext* context, const v1::Verdict& verdict);

  Evaluator* const evaluator_;
  Family<Counter>& outcomes_;
  Family<Counter>& abandoned_;
  Family<Histogram>& stage_seconds_;
  Family<Gauge>& queue_depth_;
  Family<Gauge>& serving_;
  Family<Counter>& cache_hits_;
  Family<Gauge>& cache_nondeterministic_;
};

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_SANDBOX_SERVICE_H_
