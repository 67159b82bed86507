#include "common/testing/testing.h"

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace kernelrl::testing {

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr && *t != '\0' ? t : "/tmp";
}

std::string NewTempDir(const std::string& prefix) {
  std::string tmpl = TempDir() + "/" + prefix + "XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    std::perror(("mkdtemp " + tmpl).c_str());
    std::abort();
  }
  return tmpl;
}

std::string Python() {
  const char* py = std::getenv("KERNELRL_PYTHON");
  return py != nullptr && *py != '\0' ? py : "python3";
}

std::string FindTorchPython() {
  const char* env = std::getenv("KERNELRL_PYTHON");
  for (const std::string& cand : {std::string(env ? env : ""), std::string("python3"),
                                  std::string("/root/.pyenv/shims/python3"), std::string("/usr/local/bin/python3"),
                                  std::string("/usr/bin/python3")}) {
    if (cand.empty()) continue;
    const std::string cmd = cand + " -c 'import torch' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return cand;
  }
  return "";
}

absl::Time FakeClock::Now() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FakeClock::Advance(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  now_ += d;
}

bool WaitFor(const std::function<bool()>& done, absl::Duration timeout, Clock* clock, absl::Duration poll) {
  const absl::Time deadline = clock->Now() + timeout;
  while (true) {
    if (done()) return true;
    if (clock->Now() >= deadline) return false;
    clock->SleepFor(poll);
  }
}

std::map<std::string, double> ParseScrape(const std::string& text) {
  std::map<std::string, double> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    double v = 0;
    if (sp != absl::string_view::npos && absl::SimpleAtod(line.substr(sp + 1), &v)) {
      out[std::string(line.substr(0, sp))] = v;
    }
  }
  return out;
}

}  // namespace kernelrl::testing
