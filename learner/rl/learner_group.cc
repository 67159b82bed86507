#include "learner/rl/learner_group.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "common/config.h"
#include "common/log.h"
#include "common/service.h"
#include "proto/learner_config.pb.h"

namespace kernelrl::learner::rl {
namespace {

dist::Rendezvous RendezvousOf(const dist::RankPlan& plan, const std::string& address) {
  return {plan.rank, plan.world_size, address, plan.timeout};
}

}  // namespace

std::optional<int> JoinLearnerGroup(int* argc, char** argv, const char* defaults, LearnerGroup* group) {
  auto flags = dist::TakeRankFlags(argc, argv);
  if (!flags.ok()) {
    KLOG(ERROR) << "learner: " << flags.status().message();
    return 2;
  }
  v1::LearnerConfig config;
  auto request = LoadConfig(*argc, argv, defaults, &config);
  if (!request.ok() || request->help || request->print_config) return std::nullopt;  // The service says it.
  auto plan = dist::PlanRank(config.distributed(), *flags);
  if (!plan.ok()) {
    KLOG(ERROR) << "learner: bad configuration: " << plan.status().message();
    return 2;
  }
  group->plan = *plan;
  group->sharding = {config.distributed().sharding(), plan->ranks_per_host};
  if (plan->world_size == 1) {
    if (config.distributed().sharding() != v1::DistributedConfig::REPLICATE) {
      KLOG(WARNING) << "learner: distributed.sharding " << v1::DistributedConfig::Sharding_Name(config.distributed().sharding())
                    << " with one rank: jobs train unsharded (set distributed.ranks_per_host or hosts)";
    }
    return std::nullopt;
  }
  if (plan->spawned) {
    auto d = dist::DataParallel::ConnectNccl(RendezvousOf(*plan, plan->rendezvous), plan->local_rank);
    absl::Status s = d.ok() ? RunDpFollower(d->get()) : d.status();
    if (!s.ok()) {
      KLOG(ERROR) << "data-parallel rank " << plan->rank << ": " << s;
    }
    return s.ok() ? 0 : 1;
  }
  std::string address = plan->rendezvous;
  if (plan->rank == 0) {
    auto a = dist::DataParallel::HostTcpStore(plan->store_host, plan->store_port, plan->timeout);
    if (!a.ok()) {
      KLOG(ERROR) << a.status();
      return 1;
    }
    address = *a;
  }
  group->plan.rendezvous = address;
  auto pids = dist::SpawnHostRanks(std::vector<std::string>(argv + 1, argv + *argc), *plan, address);
  if (!pids.ok()) {
    KLOG(ERROR) << pids.status();
    return 1;
  }
  group->ranks = *pids;
  if (plan->rank != 0) return std::nullopt;  // ServeFollowerHost joins.
  auto d = dist::DataParallel::ConnectNccl(RendezvousOf(*plan, address), 0);
  if (!d.ok()) {
    KLOG(ERROR) << "data-parallel rank 0: " << d.status();
    dist::TerminateRanks(group->ranks);
    return 1;
  }
  KLOG(INFO) << "data-parallel rank 0 of " << plan->world_size << " (" << config.distributed().hosts() << " host(s))"
             << " on " << (*d)->device().str() << ", rendezvous " << address;
  group->dp = std::move(*d);
  return std::nullopt;
}

int ServeFollowerHost(int argc, char** argv, const char* defaults, LearnerGroup* group) {
  v1::LearnerConfig config;
  std::atomic<bool> following{true};
  absl::Status followed = absl::OkStatus();
  std::thread follower;
  const dist::RankPlan plan = group->plan;
  const int rc = RunServiceMain(
      argc, argv, "learner", defaults, &config, config.mutable_server(),
      [&]() -> absl::StatusOr<std::vector<grpc::Service*>> {
        follower = std::thread([&] {
          auto d = dist::DataParallel::ConnectNccl(RendezvousOf(plan, plan.rendezvous), 0);
          if (d.ok()) {
            KLOG(INFO) << "data-parallel rank " << plan.rank << " (host " << plan.host_rank << ") joined";
          }
          followed = d.ok() ? RunDpFollower(d->get()) : d.status();
          following.store(false);
          ::kill(::getpid(), SIGTERM);  // Rank 0 said exit, or the group failed: stop serving.
        });
        return std::vector<grpc::Service*>{};
      },
      [&] { return following.load(); });
  if (following.load()) {
    // Stopped from outside while following: rank 0's next collective fails
    // at its timeout; nothing here can end the one this thread is in.
    KLOG(WARNING) << "data-parallel rank " << plan.rank << ": stopped while following rank 0";
    dist::TerminateRanks(group->ranks);
    (void)dist::WaitRanks(group->ranks);
    ::_exit(rc == 0 ? 1 : rc);
  }
  if (follower.joinable()) follower.join();
  if (!followed.ok()) {
    KLOG(ERROR) << "data-parallel rank " << plan.rank << ": " << followed;
  }
  if (auto s = dist::WaitRanks(group->ranks); !s.ok()) {
    KLOG(ERROR) << "host " << plan.host_rank << ": " << s;
    return 1;
  }
  return rc != 0 ? rc : followed.ok() ? 0 : 1;
}

void LeaveLearnerGroup(DpLeader* leader, LearnerGroup* group) {
  if (leader == nullptr) return;
  if (auto s = leader->Exit(); !s.ok()) {
    KLOG(WARNING) << "data-parallel exit: " << s;
    dist::TerminateRanks(group->ranks);
  }
  // The spawned ranks' exit waits for rank 0's communicators to go (DataParallel::Shutdown).
  if (group->dp != nullptr) group->dp->Shutdown();
  if (auto s = dist::WaitRanks(group->ranks); !s.ok()) {
    KLOG(WARNING) << s;
  }
}

}  // namespace kernelrl::learner::rl
