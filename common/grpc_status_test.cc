#include "common/grpc_status.h"

#include <random>
#include <string>

#include "gtest/gtest.h"

namespace kernelrl {
namespace {

// Every canonical code survives the round trip with its message.
TEST(GrpcStatusTest, CodesAndMessagesRoundTrip) {
  std::mt19937 rng(std::random_device{}());
  for (int code = 1; code <= 16; ++code) {
    const std::string message = "failure " + std::to_string(rng());
    const absl::Status in(static_cast<absl::StatusCode>(code), message);
    const grpc::Status wire = ToGrpcStatus(in);
    EXPECT_EQ(static_cast<int>(wire.error_code()), code);
    EXPECT_EQ(wire.error_message(), message);
    EXPECT_EQ(FromGrpcStatus(wire), in);
    EXPECT_EQ(FromGrpcStatus(wire, "SubmitJob").message(), "SubmitJob: " + message);
  }
  // Named pairs, so a renumbering on either side shows up by name.
  EXPECT_EQ(ToGrpcStatus(absl::NotFoundError("x")).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ToGrpcStatus(absl::UnavailableError("x")).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(ToGrpcStatus(absl::FailedPreconditionError("x")).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK, "ctx").ok());
}

}  // namespace
}  // namespace kernelrl
