#include "learner/dist/tcp_address.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kernelrl::learner::dist {

absl::StatusOr<TcpAddress> ParseTcpAddress(absl::string_view address, absl::string_view what) {
  absl::string_view hp = address;
  const bool tcp = absl::ConsumePrefix(&hp, "tcp://");
  const size_t colon = hp.rfind(':');
  int port = -1;
  if (!tcp || colon == absl::string_view::npos || colon == 0 || !absl::SimpleAtoi(hp.substr(colon + 1), &port) ||
      port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", address, "': expected tcp://HOST:PORT"));
  }
  return TcpAddress{std::string(hp.substr(0, colon)), port};
}

}  // namespace kernelrl::learner::dist
