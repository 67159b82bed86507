#include "tests/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace kernelrl::testing {

Subprocess::Subprocess(const std::string& path, const std::vector<std::string>& args, const std::string& log_path)
    : log_path_(log_path) {
  std::vector<std::string> all = {path};
  all.insert(all.end(), args.begin(), args.end());
  pid_ = ::fork();
  if (pid_ == 0) {
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    // The test runner may block signals; the child must start with a clean mask.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(path.c_str(), argv.data());
    ::_exit(127);
  }
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !exited_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

void Subprocess::Signal(int signal_number) { ::kill(pid_, signal_number); }

bool Subprocess::Wait(double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!exited_) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      if (WIFEXITED(status)) exit_code_ = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) term_signal_ = WTERMSIG(status);
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

std::string Subprocess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

bool ReadPortFile(const std::string& path, double timeout_s, int* grpc_port, int* metrics_port) {
  return WaitFor(
      [&] {
        std::ifstream in(path);
        std::string line;
        int found = 0;
        while (std::getline(in, line)) {
          if (line.rfind("grpc_port=", 0) == 0) *grpc_port = std::atoi(line.c_str() + 10), ++found;
          if (line.rfind("metrics_port=", 0) == 0) *metrics_port = std::atoi(line.c_str() + 13), ++found;
        }
        return found == 2;
      },
      absl::Seconds(timeout_s), RealClock(), absl::Milliseconds(20));
}

}  // namespace kernelrl::testing
