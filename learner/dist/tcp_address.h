// A TCP rendezvous address, "tcp://HOST:PORT": the learner group's
// (distributed.rendezvous), a c10d TCPStore's, the policy replicas' sync
// group's (policy.remote_replicas.rendezvous). One parser for all of them.
#ifndef KERNELRL_LEARNER_DIST_TCP_ADDRESS_H_
#define KERNELRL_LEARNER_DIST_TCP_ADDRESS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kernelrl::learner::dist {

struct TcpAddress {
  std::string host;  // Non-empty.
  int port = 0;      // 1..65535.
};

// InvalidArgument naming `what` (the config field) for anything else.
absl::StatusOr<TcpAddress> ParseTcpAddress(absl::string_view address, absl::string_view what);

}  // namespace kernelrl::learner::dist

#endif  // KERNELRL_LEARNER_DIST_TCP_ADDRESS_H_
