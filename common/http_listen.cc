#include "common/http_listen.h"

#include <atomic>
#include <memory>

#include "absl/status/status.h"
#include "absl/time/clock.h"

namespace kernelrl {

absl::StatusOr<std::thread> ListenInBackground(httplib::Server* server) {
  auto returned = std::make_shared<std::atomic<bool>>(false);
  std::thread t([server, returned] {
    server->listen_after_bind();
    returned->store(true);
  });
  while (!server->is_running()) {
    if (returned->load()) {  // The loop gave up (a closed socket): nothing to wait for.
      t.join();
      return absl::UnavailableError("the HTTP server's accept loop ended before it ran");
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  return t;
}

}  // namespace kernelrl
