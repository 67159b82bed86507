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

absl::StatusOr<std::vector<pid_t>> SpawnRanks(const std::vector<std::string>& args, int world_size,
                                              const std::string& rendezvous) {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return absl::InternalError(absl::StrCat("readlink /proc/self/exe: ", std::strerror(errno)));
  exe[n] = '\0';
  const pid_t parent = ::getpid();
  std::vector<pid_t> pids;
  for (int rank = 1; rank < world_size; ++rank) {
    // The argument vector is built before fork: the child only calls
    // async-signal-safe functions.
    std::vector<std::string> strings = {exe};
    strings.insert(strings.end(), args.begin(), args.end());
    strings.push_back(absl::StrCat("--dp_rank=", rank));
    strings.push_back(absl::StrCat("--dp_world_size=", world_size));
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
      if (::getppid() != parent) ::_exit(127);  // Rank 0 died before prctl took effect.
      // Rank 0 may block termination signals for its own handling; a rank starts with none blocked.
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execv(exe, argv.data());
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  KLOG(INFO) << "data-parallel: spawned " << pids.size() << " rank(s), rendezvous " << rendezvous;
  return pids;
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
      if (first.ok()) first = absl::InternalError(absl::StrCat("waitpid rank ", i + 1, ": ", std::strerror(errno)));
      continue;
    }
    if (first.ok() && WIFEXITED(status) && WEXITSTATUS(status) != 0) {
      first = absl::InternalError(absl::StrCat("rank ", i + 1, " exited with ", WEXITSTATUS(status)));
    } else if (first.ok() && WIFSIGNALED(status)) {
      first = absl::InternalError(absl::StrCat("rank ", i + 1, " killed by signal ", WTERMSIG(status)));
    }
  }
  return first;
}

void TerminateRanks(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) ::kill(p, SIGTERM);
}

}  // namespace kernelrl::learner::dist
