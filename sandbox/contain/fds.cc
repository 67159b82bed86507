// Close every inherited descriptor except the protocol pipes, so a candidate
// cannot talk to the worker, the zygote or the reference process through a
// leaked fd.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "sandbox/contain/steps.h"

namespace kernelrl::sandbox {

bool CloseInheritedFds(const KrPolicy& p, StepLog& log) {
  if (!p.close_fds) return true;
  std::vector<int> keep(p.keep_fds, p.keep_fds + std::max(0, p.num_keep_fds));
  keep.push_back(0);
  keep.push_back(1);
  keep.push_back(2);
  // Collect first, close after: closing while iterating /proc/self/fd would
  // close the directory's own descriptor.
  std::vector<int> open_fds;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) {
    // Fall back to a fixed range.
    for (int fd = 3; fd < 4096; ++fd) open_fds.push_back(fd);
  } else {
    const int self = dirfd(dir);
    while (struct dirent* e = readdir(dir)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      int fd = atoi(e->d_name);
      if (fd != self) open_fds.push_back(fd);
    }
    closedir(dir);
  }
  for (int fd : open_fds) {
    if (std::find(keep.begin(), keep.end(), fd) == keep.end()) close(fd);
  }
  log.Ok("close_fds");
  return true;
}

}  // namespace kernelrl::sandbox
