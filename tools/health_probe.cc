// health_probe HOST:PORT [SERVICE]: asks grpc.health.v1.Health/Check and
// prints the status. Exit 0 only when SERVING — usable as a readiness probe.
#include <chrono>
#include <iostream>

#include "grpcpp/grpcpp.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: health_probe HOST:PORT [SERVICE]\n";
    return 2;
  }
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  grpc::health::v1::HealthCheckRequest request;
  if (argc > 2) request.set_service(argv[2]);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    std::cout << "UNREACHABLE (" << status.error_message() << ")\n";
    return 1;
  }
  std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status()) << "\n";
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}
