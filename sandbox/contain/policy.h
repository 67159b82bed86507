// KrPolicy: what one contained process may do, as a plain C struct so that the
// trusted Python harness can fill it through ctypes and the C++ worker can
// fill it directly. Zero/NULL always means "skip this step".
#ifndef KERNELRL_SANDBOX_CONTAIN_POLICY_H_
#define KERNELRL_SANDBOX_CONTAIN_POLICY_H_

#ifdef __cplusplus
extern "C" {
#endif

enum KrSeccompProfile {
  KR_SECCOMP_NONE = 0,
  // Candidate code: no new processes (threads only), no sockets except
  // AF_UNIX, no ptrace/mount/namespace/module/bpf/perf/keyring syscalls.
  KR_SECCOMP_CANDIDATE = 1,
  // Compilers: like CANDIDATE but fork/exec of helper tools is allowed.
  KR_SECCOMP_COMPILER = 2,
};

typedef struct KrPolicy {
  // Namespaces (phase 1, before the fork that makes the pid-1 child).
  int user_ns;   // Map the caller's uid/gid to root inside; needed unprivileged.
  int pid_ns;    // The next fork becomes pid 1; its death kills the rest.
  int net_ns;    // Only a down loopback: no network at all.
  int mount_ns;  // Private mount table for the steps below.
  int ipc_ns;    // No SysV IPC / POSIX mqueue shared with the host.
  int uts_ns;
  // Filesystem view (phase 2, needs mount_ns).
  int readonly_root;          // Remount "/" read-only, recursively.
  int mount_proc;             // Fresh /proc for the pid namespace.
  const char* scratch_dir;    // tmpfs of scratch_bytes mounted here (rw).
  long long scratch_bytes;
  const char* writable_dirs;  // ':'-separated existing dirs kept writable.
  const char* hidden_dirs;    // ':'-separated dirs covered by an empty ro tmpfs.
  // Resource limits (phase 2). 0 = leave as is. Never RLIMIT_AS for CUDA.
  long long cpu_seconds;
  long long data_bytes;       // RLIMIT_DATA
  long long as_bytes;         // RLIMIT_AS (compilers only)
  long long fsize_bytes;      // RLIMIT_FSIZE
  long long nofile;           // RLIMIT_NOFILE
  long long core_bytes_plus1; // RLIMIT_CORE + 1 (so 1 means "core 0")
  // File descriptors kept open (phase 2); all others are closed. NULL/0 with
  // close_fds = 0 keeps everything.
  int close_fds;
  const int* keep_fds;
  int num_keep_fds;
  // Process (phase 2).
  int new_process_group;  // setpgid(0, 0): the watchdog kills the group.
  int parent_death_signal;  // e.g. SIGKILL (9); 0 = none.
  // Seccomp (phase 3, after no_new_privs).
  int seccomp_profile;    // KrSeccompProfile
  // ---- Appended later (the harness's ctypes mirror is checked against this
  // layout at load: kr_policy_size/kr_policy_offset in c_api.cc). Zeroed, the
  // steps below are skipped and the process keeps the host view and identity.
  // Constructed root (phase 2, needs mount_ns; root.cc): "/" becomes a fresh
  // tmpfs holding only the system's libraries and tools (root_plan.cc), the
  // paths listed here bound read-only at their own place, the writable dirs,
  // the scratch tmpfs (also at /tmp), a minimal /dev and a fresh /proc. With
  // it, readonly_root and hidden_dirs have nothing left to act on.
  int new_root;
  const char* root_dir;   // empty dir the root is built on; NULL = scratch_dir
  const char* ro_paths;   // ':'-separated host paths (dirs or files); missing ones are skipped
  const char* job_ro_dirs;  // ':'-separated job dirs (workspace, artifacts): read-only, owned by the identity
  const char* dev_paths;  // ':'-separated device nodes or dirs added to /dev (GPU)
  // Identity (phase 2, last; identity.cc): uid/gid the process runs as from
  // then on, with no capabilities (e.g. 65534, nobody). 0 = keep.
  int run_as_uid;
  int run_as_gid;
} KrPolicy;

// Bits returned by kr_probe_host(): what this host lets us do.
enum KrCapability {
  KR_CAP_USER_NS = 1 << 0,
  KR_CAP_PID_NS = 1 << 1,
  KR_CAP_NET_NS = 1 << 2,
  KR_CAP_MOUNT_NS = 1 << 3,
  KR_CAP_IPC_NS = 1 << 4,
  KR_CAP_TMPFS = 1 << 5,
  KR_CAP_RO_REMOUNT = 1 << 6,
  KR_CAP_PROC_MOUNT = 1 << 7,
  KR_CAP_SECCOMP = 1 << 8,
  KR_CAP_UTS_NS = 1 << 9,
  KR_CAP_PIVOT_ROOT = 1 << 10,     // a tmpfs root can be built and pivoted into
  KR_CAP_HOST_IDENTITY = 1 << 11,  // the sandbox uid is a host uid other than the worker's
};

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // KERNELRL_SANDBOX_CONTAIN_POLICY_H_
