#include "learner/dist/launcher.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "learner/dist/tcp_address.h"

namespace kernelrl::learner::dist {

absl::StatusOr<RankFlags> TakeRankFlags(int* argc, char** argv) {
  RankFlags f;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    absl::string_view a = argv[i];
    bool ok = true;
    if (absl::ConsumePrefix(&a, "--dp_rank=")) {
      ok = absl::SimpleAtoi(a, &f.rank);
    } else if (absl::ConsumePrefix(&a, "--dp_world_size=")) {
      ok = absl::SimpleAtoi(a, &f.world_size);
    } else if (absl::ConsumePrefix(&a, "--dp_rendezvous=")) {
      f.rendezvous = std::string(a);
    } else {
      argv[out++] = argv[i];
      continue;
    }
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("bad launcher flag ", argv[i]));
  }
  *argc = out;
  argv[out] = nullptr;
  if (f.world_size < 1 || f.rank < 0 || f.rank >= f.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("launcher flags: rank ", f.rank, " of world size ", f.world_size));
  }
  if (f.rank > 0 && f.rendezvous.empty()) return absl::InvalidArgumentError("--dp_rank > 0 needs --dp_rendezvous");
  return f;
}

absl::StatusOr<RankPlan> PlanRank(const v1::DistributedConfig& config, const RankFlags& flags) {
  RankPlan p;
  p.ranks_per_host = config.ranks_per_host() == 0 ? 1 : config.ranks_per_host();
  const int hosts = config.hosts() == 0 ? 1 : config.hosts();
  if (p.ranks_per_host < 1) {
    return absl::InvalidArgumentError(absl::StrCat("distributed.ranks_per_host ", p.ranks_per_host, " < 1"));
  }
  if (hosts < 1) return absl::InvalidArgumentError(absl::StrCat("distributed.hosts ", hosts, " < 1"));
  if (config.host_rank() < 0 || config.host_rank() >= hosts) {
    return absl::InvalidArgumentError(
        absl::StrCat("distributed.host_rank ", config.host_rank(), " is not in 0..", hosts - 1, " (hosts ", hosts, ")"));
  }
  if (config.sharding() == v1::DistributedConfig::HYBRID_SHARD && hosts < 2) {
    return absl::InvalidArgumentError("distributed.sharding HYBRID_SHARD needs hosts > 1 (one host: FULL_SHARD)");
  }
  if (config.timeout_seconds() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("distributed.timeout_seconds ", config.timeout_seconds(), " < 0"));
  }
  if (config.timeout_seconds() > 0) p.timeout = absl::Seconds(config.timeout_seconds());
  p.world_size = hosts * p.ranks_per_host;
  p.rendezvous = config.rendezvous();
  if (!p.rendezvous.empty()) {
    auto tcp = ParseTcpAddress(p.rendezvous, "distributed.rendezvous");
    if (!tcp.ok()) return tcp.status();
    p.store_host = tcp->host;
    p.store_port = tcp->port;
  } else if (hosts > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "distributed.hosts ", hosts, " needs distributed.rendezvous: \"tcp://HOST:PORT\" of host 0, the same on every host"));
  } else {
    p.rendezvous = "tcp://127.0.0.1:0";
    p.store_host = "127.0.0.1";
  }
  if (flags.rendezvous.empty()) {  // The host's first rank.
    if (flags.rank != 0 || flags.world_size != 1) {
      return absl::InvalidArgumentError("--dp_rank / --dp_world_size without --dp_rendezvous");
    }
    p.host_rank = config.host_rank();
    p.rank = p.host_rank * p.ranks_per_host;
    return p;
  }
  if (flags.world_size != p.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("launcher flags: world size ", flags.world_size, " but the config's is ",
                                                   p.world_size, " (hosts x ranks_per_host)"));
  }
  p.spawned = true;
  p.rank = flags.rank;
  p.host_rank = flags.rank / p.ranks_per_host;
  p.local_rank = flags.rank % p.ranks_per_host;
  p.rendezvous = flags.rendezvous;
  if (p.local_rank == 0 || p.host_rank != config.host_rank()) {
    return absl::InvalidArgumentError(absl::StrCat("launcher flags: rank ", flags.rank, " is not a spawned rank of host ",
                                                   config.host_rank()));
  }
  return p;
}

absl::StatusOr<std::vector<pid_t>> SpawnHostRanks(const std::vector<std::string>& args, const RankPlan& plan,
                                                  const std::string& rendezvous) {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return absl::InternalError(absl::StrCat("readlink /proc/self/exe: ", std::strerror(errno)));
  exe[n] = '\0';
  const pid_t parent = ::getpid();
  std::vector<pid_t> pids;
  for (int local = 1; local < plan.ranks_per_host; ++local) {
    const int rank = plan.rank + local;
    // The argument vector is built before fork: the child only calls
    // async-signal-safe functions.
    std::vector<std::string> strings = {exe};
    strings.insert(strings.end(), args.begin(), args.end());
    strings.push_back(absl::StrCat("--dp_rank=", rank));
    strings.push_back(absl::StrCat("--dp_world_size=", plan.world_size));
    strings.push_back(absl::StrCat("--dp_rendezvous=", rendezvous));
    std::vector<char*> argv;
    for (std::string& s : strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
      TerminateRanks(pids);
      return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // The parent died before prctl took effect.
      // The parent may block termination signals for its own handling; a rank starts with none blocked.
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execv(exe, argv.data());
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  KLOG(INFO) << "data-parallel: host " << plan.host_rank << " spawned " << pids.size() << " rank(s), rendezvous "
             << rendezvous;
  return pids;
}

absl::StatusOr<std::vector<pid_t>> SpawnRanks(const std::vector<std::string>& args, int world_size,
                                              const std::string& rendezvous) {
  RankPlan plan;
  plan.world_size = world_size;
  plan.ranks_per_host = world_size;
  return SpawnHostRanks(args, plan, rendezvous);
}

absl::Status WaitRanks(const std::vector<pid_t>& pids) {
  absl::Status first = absl::OkStatus();
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    pid_t r;
    do {
      r = ::waitpid(pids[i], &status, 0);
    } while (r < 0 && errno == EINTR);
    if (r < 0) {
      if (first.ok()) first = absl::InternalError(absl::StrCat("waitpid local rank ", i + 1, ": ", std::strerror(errno)));
      continue;
    }
    if (first.ok() && WIFEXITED(status) && WEXITSTATUS(status) != 0) {
      first = absl::InternalError(absl::StrCat("local rank ", i + 1, " exited with ", WEXITSTATUS(status)));
    } else if (first.ok() && WIFSIGNALED(status)) {
      first = absl::InternalError(absl::StrCat("local rank ", i + 1, " killed by signal ", WTERMSIG(status)));
    }
  }
  return first;
}

void TerminateRanks(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) ::kill(p, SIGTERM);
}

}  // namespace kernelrl::learner::dist
