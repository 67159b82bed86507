// Client channels that spread calls over several servers with gRPC's own
// client-side load balancing: the target names them all
// ("ipv4:10.0.0.1:50051,10.0.0.2:50051", "dns:///policy.ns.svc:50051"; a
// plain "host:port" is one server), the round_robin policy sends
// consecutive calls to consecutive READY servers and skips those that are
// down (or, with health_check, report NOT_SERVING on grpc.health.v1).
#ifndef KERNELRL_COMMON_GRPC_CHANNEL_H_
#define KERNELRL_COMMON_GRPC_CHANNEL_H_

#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"

namespace kernelrl {

inline std::shared_ptr<grpc::Channel> RoundRobinChannel(const std::string& target, bool health_check,
                                                        int max_message_bytes = 64 << 20) {
  grpc::ChannelArguments args;
  args.SetServiceConfigJSON(health_check
                                ? R"({"loadBalancingConfig": [{"round_robin": {}}], "healthCheckConfig": {"serviceName": ""}})"
                                : R"({"loadBalancingConfig": [{"round_robin": {}}]})");
  args.SetMaxReceiveMessageSize(max_message_bytes);
  args.SetMaxSendMessageSize(max_message_bytes);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_GRPC_CHANNEL_H_
