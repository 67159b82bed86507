// absl::Status <-> grpc::Status at the service boundary. The canonical codes
// share their numbering (both follow google.rpc.Code), so the conversion keeps
// the code and the message; one definition for every adapter and client.
#ifndef KERNELRL_COMMON_GRPC_STATUS_H_
#define KERNELRL_COMMON_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace kernelrl {

// What a service adapter returns for a core's Status.
grpc::Status ToGrpcStatus(const absl::Status& status);

// What a client makes of a failed call: same code, message prefixed with
// `context` (e.g. the method name) when it is not empty.
absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view context = "");

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_GRPC_STATUS_H_
