#ifndef KERNELRL_COMMON_HTTP_LISTEN_H_
#define KERNELRL_COMMON_HTTP_LISTEN_H_

#include <thread>

#include "absl/status/statusor.h"
#include "httplib.h"

namespace kernelrl {

// Runs a bound httplib server's accept loop on a new thread and returns that
// thread once the loop runs. httplib's stop() does nothing until the loop has
// marked itself running, so a stop() that came earlier would be lost and the
// thread's join would never return.
absl::StatusOr<std::thread> ListenInBackground(httplib::Server* server);

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_HTTP_LISTEN_H_
