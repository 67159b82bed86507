// RootPlan: the filesystem view the constructed-root step (root.cc) gives a
// contained process, as data. PlanRoot computes it from the policy and the
// host with stat/realpath/readlink only (no mounts), so the supervisor logs
// the exact view before the child builds it, and tests can inspect it.
//
// The view holds, and nothing else of the host:
//   - kSystemPaths (root_plan.cc): /usr, the /bin /lib... links, the dynamic
//     linker's cache and the CPU topology in /sys, all read-only;
//   - KrPolicy.ro_paths, read-only at their own place (the Python install,
//     torch, the harness, the toolchain), and KrPolicy.job_ro_dirs (the
//     workspace and artifact dirs, handed to the identity so it may read them);
//   - KrPolicy.writable_dirs, writable; the scratch tmpfs (also at /tmp);
//   - /dev with null, zero, full, random, urandom and KrPolicy.dev_paths;
//   - a fresh /proc; /etc/passwd and /etc/group naming only root and the
//     sandbox identity.
// Invariants: every bind target is a canonical host path (symlinks on the
// way are recreated as symlinks, never followed while building), a path
// already inside a bound tree is not bound again, and no read-only path may
// contain the root's staging dir, the scratch or a writable dir (binding it
// would expose the job's own trusted dir and every other job).
#ifndef KERNELRL_SANDBOX_CONTAIN_ROOT_PLAN_H_
#define KERNELRL_SANDBOX_CONTAIN_ROOT_PLAN_H_

#include <string>
#include <vector>

#include "sandbox/contain/policy.h"

namespace kernelrl::sandbox {

struct RootEntry {
  enum Kind {
    kBindRo,   // host `source` bound read-only at `path` (recursive)
    kBindRw,   // host `source` bound writable at `path`, handed to the identity
    kSymlink,  // symlink at `path` pointing to `source` (the host's link text)
    kScratch,  // size-capped tmpfs at `path`, owned by the identity
    kTmpAlias, // the scratch bound again at /tmp
    kDev,      // tmpfs /dev, its nodes (kDevNode) and links (kSymlink) follow
    kDevNode,  // host device node or device dir `source` bound at `path`
    kProc,     // fresh procfs at /proc
    kFile,     // generated file at `path` with content `source`
  };
  Kind kind;
  std::string path;
  std::string source;
  bool is_dir = true;
  bool hand_over = false;  // kBindRo of a job dir: chowned to the identity first
};

struct RootPlan {
  std::string root_dir;                 // where the tmpfs root is staged
  std::vector<RootEntry> entries;       // in build order
  std::vector<std::string> skipped;     // "path (why)": requested but not in the view
  long long scratch_bytes = 0;
};

RootPlan PlanRoot(const KrPolicy& p);

// One block of lines for the contain log: "root: filesystem view ..." then
// the read-only, writable, scratch, /dev, /proc and generated entries.
std::string DescribeRootPlan(const RootPlan& plan);

// Host paths a tool started by name needs in the view: the install prefix of
// its resolved executable (…/bin/x -> …) and of the file it links to, e.g.
// "python3" -> a pyenv root or a venv and the interpreter it points to,
// "nvcc" -> the CUDA toolkit. `path_env` is the PATH the exec will search.
std::vector<std::string> ToolPaths(const std::string& tool, const std::string& path_env);

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_CONTAIN_ROOT_PLAN_H_
