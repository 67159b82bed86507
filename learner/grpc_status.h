// absl::Status -> grpc::Status for the learner's adapters (the codes share
// their numbering). A candidate for common/ once a third service needs it.
#ifndef KERNELRL_LEARNER_GRPC_STATUS_H_
#define KERNELRL_LEARNER_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace kernelrl::learner {

inline grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace kernelrl::learner

#endif  // KERNELRL_LEARNER_GRPC_STATUS_H_
