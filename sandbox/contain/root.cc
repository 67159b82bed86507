// The constructed root (phase 2, KrPolicy.new_root): the contained process
// gets its own mount table, a tmpfs becomes its "/", the plan's entries
// (root_plan.h) are put in, the tmpfs is made read-only and the process
// pivots into it; the host's tree is detached. What the process can name
// afterwards is exactly the plan. Each step is one function below, in the
// order BuildRoot runs them; every failing syscall is logged with its
// arguments. Until the pivot nothing is lost on failure: BuildRoot undoes
// the staging mount and the caller falls back to the read-only host view.
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "sandbox/contain/path_util.h"
#include "sandbox/contain/root_plan.h"
#include "sandbox/contain/steps.h"

namespace kernelrl::sandbox {
namespace {

constexpr unsigned long long kRoAttrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string Base(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// Creates the mount point (a dir, or an empty file for a file/device) for `path`.
bool MakeMountPoint(int root_fd, const std::string& path, bool is_dir) {
  if (is_dir) {
    int fd = OpenDirsIn(root_fd, path, true, 0755);
    if (fd < 0) return false;
    close(fd);
    return true;
  }
  int dir = OpenDirsIn(root_fd, Parent(path), true, 0755);
  if (dir < 0) return false;
  int fd = openat(dir, Base(path).c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  const int saved = errno;
  close(dir);
  if (fd >= 0) close(fd);
  errno = saved;
  return fd >= 0;
}

bool EnterOwnMountTable(StepLog& log) {
  // Our own table: the supervisor (same mount namespace until now) keeps its
  // view, and nothing we mount propagates back to the host.
  if (unshare(CLONE_NEWNS) != 0) {
    log.Failed("new_root", "unshare(CLONE_NEWNS)", errno, "no constructed root (host view read-only instead)");
    return false;
  }
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    log.Failed("new_root", "mount(/, MS_REC|MS_PRIVATE)", errno, "no constructed root (host view read-only instead)");
    return false;
  }
  return true;
}

bool MountRootTmpfs(const std::string& root, StepLog& log) {
  if (root.empty()) {
    log.Failed("new_root", "(no root_dir or scratch_dir to stage the root on)", EINVAL, "no constructed root");
    return false;
  }
  if (mount("tmpfs", root.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,mode=0755") != 0) {
    log.Failed("new_root", "mount(tmpfs, " + root + ", size=4m)", errno, "no constructed root");
    return false;
  }
  return true;
}

bool BindReadOnly(int root_fd, const std::string& root, const RootEntry& e, const KrPolicy& p, StepLog& log) {
  const std::string dst = root + e.path;
  if (e.hand_over && p.run_as_uid > 0) {
    struct stat st;
    if (lstat(e.source.c_str(), &st) == 0) HandTreeTo(e.source, p.run_as_uid, p.run_as_gid, st.st_dev, 0);
  }
  if (!MakeMountPoint(root_fd, e.path, e.is_dir)) {
    log.Failed("root_bind", "mkdirat/openat(" + dst + ")", errno, e.path + " missing from the view");
    return false;
  }
  if (mount(e.source.c_str(), dst.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
    log.Failed("root_bind", "mount(" + e.source + ", " + dst + ", MS_BIND|MS_REC)", errno,
               e.path + " missing from the view");
    return false;
  }
  if (SetMountAttr(dst.c_str(), true, kRoAttrs, 0) != 0) {
    log.Failed("root_bind", "mount_setattr(" + dst + ", AT_RECURSIVE, RDONLY|NOSUID|NODEV)", errno,
               e.path + " is writable where the host lets the uid write");
    return false;
  }
  return true;
}

bool BindWritable(int root_fd, const std::string& root, const RootEntry& e, const KrPolicy& p, StepLog& log) {
  const std::string dst = root + e.path;
  if (p.run_as_uid > 0) {
    struct stat st;
    if (lstat(e.source.c_str(), &st) == 0) HandTreeTo(e.source, p.run_as_uid, p.run_as_gid, st.st_dev, 0);
  }
  if (!MakeMountPoint(root_fd, e.path, true) ||
      mount(e.source.c_str(), dst.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    log.Failed("root_bind_rw", "mount(" + e.source + ", " + dst + ", MS_BIND)", errno, e.path + " missing: no output");
    return false;
  }
  SetMountAttr(dst.c_str(), false, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0);
  return true;
}

bool MountScratch(int root_fd, const std::string& root, const RootEntry& e, const KrPolicy& p, long long bytes,
                  StepLog& log) {
  const std::string dst = root + e.path;
  std::string opts = "size=" + std::to_string(bytes) + ",mode=0700";
  if (p.run_as_uid > 0) opts += ",uid=" + std::to_string(p.run_as_uid) + ",gid=" + std::to_string(p.run_as_gid);
  if (!MakeMountPoint(root_fd, e.path, true) ||
      mount("tmpfs", dst.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
    log.Failed("scratch_tmpfs", "mount(tmpfs, " + dst + ", " + opts + ")", errno, "no scratch: nothing writable");
    return false;
  }
  return true;
}

bool BindTmpAlias(int root_fd, const std::string& root, const RootEntry& e, StepLog& log) {
  const std::string dst = root + e.path;
  const std::string src = root + e.source;
  if (!MakeMountPoint(root_fd, e.path, true) || mount(src.c_str(), dst.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    log.Failed("tmp_scratch", "mount(" + src + ", " + dst + ", MS_BIND)", errno, "/tmp is read-only");
    return false;
  }
  return true;
}

bool MountDev(int root_fd, const std::string& root, StepLog& log) {
  const std::string dst = root + "/dev";
  if (!MakeMountPoint(root_fd, "/dev", true) ||
      mount("tmpfs", dst.c_str(), "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755") != 0) {
    log.Failed("dev", "mount(tmpfs, " + dst + ")", errno, "no /dev (no /dev/null, no GPU)");
    return false;
  }
  return true;
}

bool BindDevNode(int root_fd, const std::string& root, const RootEntry& e, StepLog& log) {
  const std::string dst = root + e.path;
  if (!MakeMountPoint(root_fd, e.path, e.is_dir) ||
      mount(e.source.c_str(), dst.c_str(), nullptr, MS_BIND | (e.is_dir ? MS_REC : 0), nullptr) != 0) {
    log.Failed("dev_node", "mount(" + e.source + ", " + dst + ", MS_BIND)", errno, e.path + " missing");
    return false;
  }
  return true;
}

bool MakeLink(int root_fd, const RootEntry& e, StepLog& log) {
  int dir = OpenDirsIn(root_fd, Parent(e.path), true, 0755);
  if (dir < 0 || symlinkat(e.source.c_str(), dir, Base(e.path).c_str()) != 0) {
    const int saved = errno;
    if (dir >= 0) close(dir);
    if (saved == EEXIST) return true;
    log.Failed("root_link", "symlinkat(" + e.source + ", " + e.path + ")", saved, e.path + " does not resolve");
    return false;
  }
  close(dir);
  return true;
}

bool MountFreshProc(int root_fd, const std::string& root, StepLog& log) {
  const std::string dst = root + "/proc";
  if (!MakeMountPoint(root_fd, "/proc", true)) {
    log.Failed("proc", "mkdirat(" + dst + ")", errno, "no /proc");
    return false;
  }
  if (mount("proc", dst.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) == 0) return true;
  log.Failed("proc", "mount(proc, " + dst + ")", errno, "host /proc bound read-only instead: host processes listed");
  if (mount("/proc", dst.c_str(), nullptr, MS_BIND | MS_REC, nullptr) == 0) {
    SetMountAttr(dst.c_str(), true, kRoAttrs, 0);
  }
  return false;
}

bool WriteGenerated(int root_fd, const RootEntry& e, StepLog& log) {
  int dir = OpenDirsIn(root_fd, Parent(e.path), true, 0755);
  int fd = dir < 0 ? -1 : openat(dir, Base(e.path).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  bool ok = fd >= 0 && write(fd, e.source.data(), e.source.size()) == static_cast<ssize_t>(e.source.size());
  const int saved = errno;
  if (fd >= 0) close(fd);
  if (dir >= 0) close(dir);
  if (!ok) log.Failed("root_file", "openat/write(" + e.path + ")", saved, e.path + " missing");
  return ok;
}

bool SealRoot(const std::string& root, StepLog& log) {
  // /dev first (no new nodes or files there), then the root tmpfs itself; the
  // binds keep their own flags (the writable ones stay writable).
  if (SetMountAttr((root + "/dev").c_str(), false, MOUNT_ATTR_RDONLY, 0) != 0) {
    log.Failed("seal_root", "mount_setattr(" + root + "/dev, RDONLY)", errno, "/dev stays writable (tmpfs, 64 KiB)");
  }
  if (SetMountAttr(root.c_str(), false, MOUNT_ATTR_RDONLY, 0) != 0) {
    log.Failed("seal_root", "mount_setattr(" + root + ", RDONLY)", errno, "the root tmpfs stays writable (4 MiB)");
    return false;
  }
  return true;
}

// pivot_root(".", ".") stacks the old root on the new one; detaching it
// leaves only the new tree. A root that cannot be pivoted (initramfs) is
// moved over "/" and chrooted into instead.
bool PivotInto(const std::string& root, StepLog& log) {
  if (chdir(root.c_str()) != 0) {
    log.Failed("pivot_root", "chdir(" + root + ")", errno, "no constructed root");
    return false;
  }
  if (syscall(SYS_pivot_root, ".", ".") == 0) {
    if (umount2(".", MNT_DETACH) != 0) {
      log.Failed("pivot_root", "umount2(old root, MNT_DETACH)", errno, "host tree still reachable via ..");
      return false;
    }
  } else {
    log.Failed("pivot_root", "pivot_root(" + root + ")", errno, "falling back to MS_MOVE + chroot");
    if (mount(".", "/", nullptr, MS_MOVE, nullptr) != 0 || chroot(".") != 0) {
      log.Failed("pivot_root", "mount(MS_MOVE)/chroot(" + root + ")", errno, "no constructed root");
      return false;
    }
  }
  if (chdir("/") != 0) {
    log.Failed("pivot_root", "chdir(/)", errno, "cwd outside the new root");
    return false;
  }
  return true;
}

bool ApplyEntry(int root_fd, const std::string& root, const RootEntry& e, const KrPolicy& p, long long scratch_bytes,
                StepLog& log) {
  switch (e.kind) {
    case RootEntry::kBindRo: return BindReadOnly(root_fd, root, e, p, log);
    case RootEntry::kBindRw: return BindWritable(root_fd, root, e, p, log);
    case RootEntry::kSymlink: return MakeLink(root_fd, e, log);
    case RootEntry::kScratch: return MountScratch(root_fd, root, e, p, scratch_bytes, log);
    case RootEntry::kTmpAlias: return BindTmpAlias(root_fd, root, e, log);
    case RootEntry::kDev: return MountDev(root_fd, root, log);
    case RootEntry::kDevNode: return BindDevNode(root_fd, root, e, log);
    case RootEntry::kProc: return MountFreshProc(root_fd, root, log);
    case RootEntry::kFile: return WriteGenerated(root_fd, e, log);
  }
  return false;
}

}  // namespace

bool BuildRoot(const KrPolicy& p, StepLog& log, bool* pivoted) {
  *pivoted = false;
  const RootPlan plan = PlanRoot(p);
  if (!EnterOwnMountTable(log) || !MountRootTmpfs(plan.root_dir, log)) return false;
  int root_fd = open(plan.root_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  bool ok = root_fd >= 0;
  int failed = 0;
  for (const RootEntry& e : plan.entries) {
    if (ok && !ApplyEntry(root_fd, plan.root_dir, e, p, plan.scratch_bytes, log)) ++failed;
  }
  if (root_fd >= 0) close(root_fd);
  if (!ok || !SealRoot(plan.root_dir, log)) {
    umount2(plan.root_dir.c_str(), MNT_DETACH);
    return false;
  }
  if (!PivotInto(plan.root_dir, log)) {
    umount2(plan.root_dir.c_str(), MNT_DETACH);
    return false;
  }
  *pivoted = true;
  log.Note(DescribeRootPlan(plan) + "new_root: " +
           (failed == 0 ? std::string("ok") : std::to_string(failed) + " entries missing (above)"));
  return failed == 0;
}

}  // namespace kernelrl::sandbox
