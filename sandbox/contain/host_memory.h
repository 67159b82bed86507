// Host memory of a contained process tree, for the watchdog's memory cap and
// an optional cgroup v2 backstop. RLIMIT_AS cannot be used (CUDA maps tens of
// GiB of address space it never touches) and RLIMIT_DATA counts reservations,
// not pages: filling it at first-touch speed can outlast the wall limit. What
// exhausts a host is resident memory, so that is what is capped.
#ifndef KERNELRL_SANDBOX_CONTAIN_HOST_MEMORY_H_
#define KERNELRL_SANDBOX_CONTAIN_HOST_MEMORY_H_

#include <sys/types.h>

#include <string>

namespace kernelrl::sandbox {

// Resident anonymous + shared-memory (tmpfs/shm mapped) bytes of one process,
// from /proc/<pid>/status (RssAnon + RssShmem; VmRSS on kernels without them).
// File-backed pages (shared libraries) are left out: they are page cache the
// kernel reclaims, and CUDA/torch map a lot of them. -1 if the process is gone.
// `proc_fd`: a directory fd of the procfs to read (-1 = "/proc"). The
// supervisor passes the /proc it opened before the fork, because the candidate
// mounts a fresh /proc for its own pid namespace over the mount table the two
// share, after which "/proc/<host pid>" names nothing (or someone else).
long long ProcessHostMemoryBytes(pid_t pid, int proc_fd = -1);

// Sum over `root` and every descendant (found through
// /proc/<pid>/task/<tid>/children, so children of any thread count).
// Processes sharing pages (CoW after fork) are counted once each: the sum
// errs high, never low. `num_processes` (optional) gets how many were seen.
long long TreeHostMemoryBytes(pid_t root, int proc_fd = -1, int* num_processes = nullptr);

// "8.13 GiB" / "512.0 MiB": for verdict summaries and logs.
std::string FormatBytes(long long bytes);

// --- cgroup v2 memory backstop (optional; the watchdog works without it) ---
// Probes whether a child cgroup with the memory controller can be created
// under `parent` (a cgroup2 directory; "" = /sys/fs/cgroup). Returns "" when
// it can, else why not (for the worker's degradation warning).
std::string ProbeMemoryCgroup(const std::string& parent);
// Creates <parent>/<name> with memory.max = max_bytes and no swap. Returns its
// path, or "" with `why` set.
std::string CreateMemoryCgroup(const std::string& parent, const std::string& name, long long max_bytes,
                               std::string* why);
// Moves the calling process into `path` (its future children inherit it).
bool EnterCgroup(const std::string& path, std::string* why);
// Reads memory.events "oom_kill" and memory.peak, then removes the cgroup
// (retrying while the last members finish exiting). Returns the oom_kill
// count (-1 if unreadable).
long long RemoveMemoryCgroup(const std::string& path, long long* peak_bytes);

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_CONTAIN_HOST_MEMORY_H_
