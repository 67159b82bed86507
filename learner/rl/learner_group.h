// learner_main's place in the learner group (LearnerConfig.distributed,
// learner/dist/launcher.h): alone, global rank 0 (serves the job API and
// leads: DpLeader), the first rank of another host (serves health and
// /metrics while it follows), or a spawned rank (follows, then exits).
#ifndef KERNELRL_LEARNER_RL_LEARNER_GROUP_H_
#define KERNELRL_LEARNER_RL_LEARNER_GROUP_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <vector>

#include "learner/dist/data_parallel.h"
#include "learner/dist/launcher.h"
#include "learner/rl/dp_job.h"

namespace kernelrl::learner::rl {

struct LearnerGroup {
  dist::RankPlan plan;
  std::unique_ptr<dist::DataParallel> dp;  // Global rank 0 of a group of > 1.
  std::vector<pid_t> ranks;                // The host's ranks this process spawned.
  GroupSharding sharding;                  // What rank 0's DpLeader trains with.
  bool follower_host() const { return plan.world_size > 1 && plan.rank != 0; }
};

// The first call of learner_main, before any thread exists. Takes the
// launcher's rank flags out of argv and reads `distributed` from the config
// the command line names (with `defaults`; a config that does not load is
// left for the service's own loading to report). A host's first rank spawns
// the host's other ranks; global rank 0 also serves the rendezvous store and
// joins the NCCL group on cuda:0. Returns the exit code when the process is
// done here (a spawned rank that followed until "exit"; a group that cannot
// form: 2 for its config, 1 otherwise), else std::nullopt with *group filled.
std::optional<int> JoinLearnerGroup(int* argc, char** argv, const char* defaults, LearnerGroup* group);

// The first rank of a host other than 0: serves grpc.health.v1 (SERVING while
// it follows), /metrics and /healthz on the config's ports, joins the group
// on cuda:0 and follows rank 0 until "exit" (then stops itself) or a
// termination signal. Waits for its spawned ranks; returns the exit code.
int ServeFollowerHost(int argc, char** argv, const char* defaults, LearnerGroup* group);

// Global rank 0 at shutdown: tells every rank to exit and waits for its own
// spawned ranks.
void LeaveLearnerGroup(DpLeader* leader, LearnerGroup* group);

}  // namespace kernelrl::learner::rl

#endif  // KERNELRL_LEARNER_RL_LEARNER_GROUP_H_
