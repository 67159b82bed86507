// One command, N processes: the process the user starts is rank 0; it
// re-executes its own binary (/proc/self/exe) for ranks 1..N-1 with its
// arguments plus the rank flags below. Children get SIGKILL when rank 0 dies
// (PR_SET_PDEATHSIG), so a kill -9 of the learner leaves no orphan ranks; a
// restart spawns fresh ones.
//
//   --dp_rank=R --dp_world_size=N --dp_rendezvous=tcp://host:port
//
// These flags are the launcher's protocol between its own processes, not
// configuration: the world size comes from the binary's config.
#ifndef KERNELRL_LEARNER_DIST_LAUNCHER_H_
#define KERNELRL_LEARNER_DIST_LAUNCHER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kernelrl::learner::dist {

struct RankFlags {
  int rank = 0;
  int world_size = 1;
  std::string rendezvous;  // Empty on rank 0 of a fresh launch.
};

// Removes the rank flags from argv (argc shrinks) and returns them;
// InvalidArgument for a malformed one.
absl::StatusOr<RankFlags> TakeRankFlags(int* argc, char** argv);

// Starts ranks 1..world_size-1 as children running this binary with `args`
// (argv[1..], without rank flags) plus their rank flags. stdout/stderr are
// inherited. Returns their pids in rank order.
absl::StatusOr<std::vector<pid_t>> SpawnRanks(const std::vector<std::string>& args, int world_size,
                                              const std::string& rendezvous);

// Waits for every pid; the first non-zero exit or fatal signal as an error
// naming the rank (rank = index + 1).
absl::Status WaitRanks(const std::vector<pid_t>& pids);

// SIGTERM to each pid still running (best effort).
void TerminateRanks(const std::vector<pid_t>& pids);

}  // namespace kernelrl::learner::dist

#endif  // KERNELRL_LEARNER_DIST_LAUNCHER_H_
