#include "common/grpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace kernelrl {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view context) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      context.empty() ? status.error_message() : absl::StrCat(context, ": ", status.error_message()));
}

}  // namespace kernelrl
