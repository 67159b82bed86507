// Test binary for RunServiceMain's health source: reports NOT_SERVING while
// the file named by $KERNELRL_UNHEALTHY_FILE exists (stands in for a sandbox
// worker whose GPU health probe failed).
#include <cstdlib>
#include <filesystem>
#include <string>

#include "common/service.h"
#include "proto/actor_config.pb.h"

int main(int argc, char** argv) {
  const char* flag = std::getenv("KERNELRL_UNHEALTHY_FILE");
  const std::string unhealthy_file = flag ? flag : "";
  kernelrl::v1::ActorConfig config;
  return kernelrl::RunServiceMain(
      argc, argv, "health_source", R"pb(server { drain_seconds: 0 grace_seconds: 5 })pb", &config,
      config.mutable_server(), [] { return std::vector<grpc::Service*>{}; },
      [&] { return unhealthy_file.empty() || !std::filesystem::exists(unhealthy_file); });
}
