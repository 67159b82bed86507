// The learner group: `hosts` hosts run the same binary and config but for
// their `host_rank` (LearnerConfig.distributed), each `ranks_per_host`
// processes, one per GPU. On each host the process the user (or Kubernetes)
// started is the host's first rank; it re-executes its own binary
// (/proc/self/exe) for the host's other ranks with its arguments plus the
// rank flags below. Children get SIGKILL when their host's first process dies
// (PR_SET_PDEATHSIG), so a kill -9 leaves no orphan ranks; a restart spawns
// fresh ones.
//
//   --dp_rank=R --dp_world_size=N --dp_rendezvous=tcp://host:port
//
// These flags are the launcher's protocol between its own processes, not
// configuration: a spawned rank reads the same config as its parent and
// derives its host and local rank from R.
#ifndef KERNELRL_LEARNER_DIST_LAUNCHER_H_
#define KERNELRL_LEARNER_DIST_LAUNCHER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/learner_config.pb.h"

namespace kernelrl::learner::dist {

struct RankFlags {
  int rank = 0;
  int world_size = 1;
  std::string rendezvous;  // Empty in a process the launcher did not spawn.
};

// Removes the rank flags from argv (argc shrinks) and returns them;
// InvalidArgument for a malformed one.
absl::StatusOr<RankFlags> TakeRankFlags(int* argc, char** argv);

// One process's place in the group.
struct RankPlan {
  int rank = 0;        // Global: host_rank * ranks_per_host + local_rank.
  int world_size = 1;  // hosts * ranks_per_host.
  int local_rank = 0;  // Its GPU: cuda:<local_rank>.
  int host_rank = 0;
  int ranks_per_host = 1;
  // "tcp://host:port"; the port is 0 when rank 0 may pick a free one
  // (one host, no rendezvous configured).
  std::string rendezvous;
  std::string store_host;  // Of the rendezvous: where rank 0's store is reached,
  int store_port = 0;      // and the port it serves.
  absl::Duration timeout = absl::Minutes(10);
  bool spawned = false;  // Started by its host's first rank.
};

// The plan of this process from the config and its rank flags (none for a
// host's first rank). InvalidArgument, naming the field, for a group that
// cannot be formed: sizes < 1, host_rank out of range, several hosts without
// a "tcp://HOST:PORT" rendezvous, hybrid sharding on one host, flags that
// disagree with the config.
absl::StatusOr<RankPlan> PlanRank(const v1::DistributedConfig& config, const RankFlags& flags);

// A host's first rank starts the host's other ranks (local ranks
// 1..ranks_per_host-1) as children running this binary with `args` (argv[1..],
// without rank flags) plus their rank flags, `rendezvous` being the address
// rank 0 serves (its port resolved). stdout/stderr are inherited. Returns
// their pids in local-rank order.
absl::StatusOr<std::vector<pid_t>> SpawnHostRanks(const std::vector<std::string>& args, const RankPlan& plan,
                                                  const std::string& rendezvous);

// One host of world_size ranks (benches and tests that start a group
// without a config): ranks 1..world_size-1.
absl::StatusOr<std::vector<pid_t>> SpawnRanks(const std::vector<std::string>& args, int world_size,
                                              const std::string& rendezvous);

// Waits for every pid; the first non-zero exit or fatal signal as an error
// naming the pid's index (local rank = index + 1).
absl::Status WaitRanks(const std::vector<pid_t>& pids);

// SIGTERM to each pid still running (best effort).
void TerminateRanks(const std::vector<pid_t>& pids);

}  // namespace kernelrl::learner::dist

#endif  // KERNELRL_LEARNER_DIST_LAUNCHER_H_
