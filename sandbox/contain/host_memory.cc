// Resident host memory of a process tree (/proc) and the optional cgroup v2
// memory backstop. libc only, like the rest of the contain library.
#include "sandbox/contain/host_memory.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace kernelrl::sandbox {
namespace {

// Whole small file (status, children, cgroup control files), or "" on error.
std::string ReadSmall(int dir_fd, const std::string& path) {
  int fd = openat(dir_fd, path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (1u << 20)) break;
  }
  close(fd);
  return out;
}

// "<key>:  <n> kB" in a /proc status text, in bytes; -1 when absent.
long long StatusKb(const std::string& text, const char* key) {
  const std::string k = std::string("\n") + key + ":";
  size_t at = text.find(k);
  if (at == std::string::npos) return -1;
  return std::strtoll(text.c_str() + at + k.size(), nullptr, 10) * 1024;
}

bool WriteText(const std::string& path, const std::string& text, std::string* why) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    if (why) *why = "write(" + path + ", \"" + text + "\"): " + std::strerror(errno);
    if (fd >= 0) close(fd);
    return false;
  }
  close(fd);
  return true;
}

bool HasWord(const std::string& list, const std::string& word) {
  size_t at = 0;
  while ((at = list.find(word, at)) != std::string::npos) {
    const bool start = at == 0 || list[at - 1] == ' ' || list[at - 1] == '\n';
    const size_t end = at + word.size();
    if (start && (end == list.size() || list[end] == ' ' || list[end] == '\n')) return true;
    at = end;
  }
  return false;
}

std::string Parent(const std::string& parent) { return parent.empty() ? "/sys/fs/cgroup" : parent; }

}  // namespace

long long ProcessHostMemoryBytes(pid_t pid, int proc_fd) {
  const std::string text =
      "\n" + ReadSmall(proc_fd >= 0 ? proc_fd : AT_FDCWD,
                       (proc_fd >= 0 ? "" : "/proc/") + std::to_string(pid) + "/status");
  if (text.size() <= 1) return -1;
  const long long anon = StatusKb(text, "RssAnon");
  if (anon < 0) return StatusKb(text, "VmRSS");  // kernels before 4.5
  return anon + std::max(0LL, StatusKb(text, "RssShmem"));
}

long long TreeHostMemoryBytes(pid_t root, int proc_fd, int* num_processes) {
  const int dir = proc_fd >= 0 ? proc_fd : AT_FDCWD;
  const std::string prefix = proc_fd >= 0 ? "" : "/proc/";
  long long total = 0;
  int seen = 0;
  std::vector<pid_t> todo = {root};
  // A bounded walk: fork bombs are seccomp's job; 4096 processes is plenty.
  while (!todo.empty() && seen < 4096) {
    const pid_t pid = todo.back();
    todo.pop_back();
    const long long bytes = ProcessHostMemoryBytes(pid, proc_fd);
    if (bytes < 0) continue;  // exited between the listing and now
    total += bytes;
    ++seen;
    // Children are listed per thread (a thread that forks is the parent).
    const std::string task_dir = prefix + std::to_string(pid) + "/task";
    int task_fd = openat(dir, task_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (task_fd < 0) continue;
    DIR* d = fdopendir(task_fd);
    if (d == nullptr) {
      close(task_fd);
      continue;
    }
    while (struct dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      const std::string kids = ReadSmall(task_fd, std::string(e->d_name) + "/children");
      const char* p = kids.c_str();
      char* end = nullptr;
      for (long v = std::strtol(p, &end, 10); end != p; v = std::strtol(p, &end, 10)) {
        todo.push_back(static_cast<pid_t>(v));
        p = end;
      }
    }
    closedir(d);  // closes task_fd
  }
  if (num_processes) *num_processes = seen;
  return total;
}

std::string FormatBytes(long long bytes) {
  char buf[32];
  if (bytes >= (1LL << 30)) {
    snprintf(buf, sizeof(buf), "%.2f GiB", bytes / double(1LL << 30));
  } else {
    snprintf(buf, sizeof(buf), "%.1f MiB", bytes / double(1LL << 20));
  }
  return buf;
}

std::string ProbeMemoryCgroup(const std::string& parent_in) {
  const std::string parent = Parent(parent_in);
  const std::string controllers = ReadSmall(AT_FDCWD, parent + "/cgroup.controllers");
  if (controllers.empty()) return parent + " is not a cgroup v2 directory (cgroup v1 host or not mounted)";
  if (!HasWord(controllers, "memory")) return "memory controller not delegated to " + parent;
  if (!HasWord(ReadSmall(AT_FDCWD, parent + "/cgroup.subtree_control"), "memory")) {
    std::string why;
    // Fails with EBUSY when the parent holds processes (no internal processes).
    if (!WriteText(parent + "/cgroup.subtree_control", "+memory", &why)) return why;
  }
  std::string why;
  const std::string probe = CreateMemoryCgroup(parent, "kernelrl-probe-" + std::to_string(getpid()), 1LL << 30, &why);
  if (probe.empty()) return why;
  RemoveMemoryCgroup(probe, nullptr);
  return "";
}

std::string CreateMemoryCgroup(const std::string& parent_in, const std::string& name, long long max_bytes,
                               std::string* why) {
  const std::string path = Parent(parent_in) + "/" + name;
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    if (why) *why = "mkdir(" + path + "): " + std::strerror(errno);
    return "";
  }
  if (!WriteText(path + "/memory.max", std::to_string(max_bytes), why)) {
    rmdir(path.c_str());
    return "";
  }
  // No swap: past memory.max the candidate is OOM-killed, not slowed into a
  // TIMEOUT by swapping. Absent without swap accounting; that is fine.
  WriteText(path + "/memory.swap.max", "0", nullptr);
  return path;
}

bool EnterCgroup(const std::string& path, std::string* why) {
  return WriteText(path + "/cgroup.procs", "0", why);
}

long long RemoveMemoryCgroup(const std::string& path, long long* peak_bytes) {
  const std::string events = "\n" + ReadSmall(AT_FDCWD, path + "/memory.events");
  long long oom_kills = -1;
  size_t at = events.find("\noom_kill ");
  if (at != std::string::npos) oom_kills = std::strtoll(events.c_str() + at + 10, nullptr, 10);
  if (peak_bytes) {
    const std::string peak = ReadSmall(AT_FDCWD, path + "/memory.peak");  // kernels >= 5.19
    *peak_bytes = peak.empty() ? -1 : std::strtoll(peak.c_str(), nullptr, 10);
  }
  // Killed members leave the cgroup as they finish exiting: retry briefly.
  for (int i = 0; i < 200 && rmdir(path.c_str()) != 0 && errno == EBUSY; ++i) usleep(5000);
  return oom_kills;
}

}  // namespace kernelrl::sandbox
