// Helpers for tests that run the real Evaluator (CPU backend) from Bazel
// runfiles: locating the harness, the contain library and a Python with torch.
#ifndef KERNELRL_SANDBOX_TESTS_E2E_UTIL_H_
#define KERNELRL_SANDBOX_TESTS_E2E_UTIL_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "common/testing/testing.h"
#include "sandbox/child_env.h"
#include "sandbox/evaluator.h"
#include "sandbox/workspace_files.h"

namespace kernelrl::sandbox::testing {

inline std::string Cwd() {
  char buf[4096];
  return getcwd(buf, sizeof(buf)) ? std::string(buf) : ".";
}

using ::kernelrl::testing::FindTorchPython;

// Kills a zygote a VerifyStage of this process started and reaps it here, so
// that the stage's next write meets a pipe with no reader. True once it died
// of the signal.
inline bool KillZygote(pid_t pid) {
  int status = 0;
  return pid > 1 && kill(pid, SIGKILL) == 0 && waitpid(pid, &status, 0) == pid && WIFSIGNALED(status);
}

inline SandboxConfig CpuConfig(const std::string& python) {
  SandboxConfig c;
  c.set_backend("cpu");
  c.set_python(python);
  c.set_harness_dir(Cwd() + "/sandbox/harness");
  c.set_contain_lib(Cwd() + "/sandbox/contain/libkernelrl_contain.so");
  c.set_work_root(::kernelrl::testing::TempDir() + "/sandbox-e2e-" + std::to_string(getpid()));
  c.mutable_verify()->set_wall_seconds(6);
  c.mutable_verify()->set_host_memory_bytes(int64_t{3} << 30);
  // Resident cap well under RLIMIT_DATA, so a hog meets the watchdog first;
  // an honest CPU candidate (torch ~0.3 GiB + small tensors) fits easily.
  c.mutable_verify()->set_resident_memory_bytes(int64_t{1} << 30);
  c.mutable_verify()->set_exchange_bytes(int64_t{256} << 20);
  c.mutable_compile()->set_max_parallel(2);
  ResolveChildEnvironmentFromHost(&c);  // What the worker's main does at start.
  return c;
}

inline EvaluateRequest Request(const std::string& task_file, const std::string& workspace_dir) {
  EvaluateRequest req;
  auto task = ReadTaskFile(task_file, task_file);
  auto ws = ReadWorkspaceDir(workspace_dir);
  if (task.ok()) *req.mutable_task() = *task;
  if (ws.ok()) *req.mutable_workspace() = *ws;
  return req;
}

// The expected outcome written in the exploit's docstring: "... Expected verdict: X."
inline std::string ExpectedOutcome(const std::string& workspace_dir) {
  std::ifstream in(workspace_dir + "/model_new.py");
  std::string first;
  std::getline(in, first);
  const std::string key = "Expected verdict: ";
  size_t at = first.find(key);
  if (at == std::string::npos) return "";
  std::string rest = first.substr(at + key.size());
  return rest.substr(0, rest.find('.'));
}

}  // namespace kernelrl::sandbox::testing

#endif  // KERNELRL_SANDBOX_TESTS_E2E_UTIL_H_
