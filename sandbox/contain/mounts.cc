// The filesystem view of a contained process: everything read-only except a
// size-capped tmpfs scratch and the explicitly writable exchange directories;
// trusted directories are hidden under an empty read-only tmpfs (a writable
// directory beneath a hidden one stays reachable, alone); /proc is remounted
// for the new pid namespace so other processes are invisible.
#include <fcntl.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "sandbox/contain/path_util.h"
#include "sandbox/contain/steps.h"

namespace kernelrl::sandbox {

namespace {

// CUDA names the threads it starts during cuInit by writing
// /proc/<pid>/task/<tid>/comm; on a read-only /proc that write fails and
// cuInit returns error 304 ("OS call failed"): that is what broke GPU jobs
// under readonly_root (docs/SANDBOX.md, "What the H100 machine allows"). So
// /proc (its own mount, not its submounts) is writable again. procfs lets a
// process write only its own entries; /proc/sys and the other system-wide
// knobs are bound read-only over it, as container runtimes do.
bool ReopenProc(StepLog& log) {
  if (SetMountAttr("/proc", false, 0, MOUNT_ATTR_RDONLY) != 0) {
    log.Failed("proc_rw", "mount_setattr(/proc, clr RDONLY)", errno,
               "/proc is read-only: CUDA cannot name its threads and cuInit fails (error 304)");
    return false;
  }
  for (const char* knob : {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"}) {
    struct stat st;
    if (stat(knob, &st) != 0) continue;
    if (mount(knob, knob, nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
        SetMountAttr(knob, true, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0) != 0) {
      log.Failed("proc_rw", std::string("bind ") + knob + " read-only", errno,
                 std::string(knob) + " as writable as the uid's permissions allow");
    }
  }
  log.Ok("proc_rw (own entries: CUDA writes its threads' comm; /proc/sys read-only)");
  return true;
}

// `dir` under an empty read-only tmpfs. A writable directory beneath it (a rollout's workspace in
// the root of every rollout) is taken out first and put back at its own path inside the tmpfs, so
// nothing else beneath `dir` is reachable, what was there when the process started or made later.
bool HideDir(const std::string& dir, const std::vector<std::string>& writable, StepLog& log) {
  std::vector<std::pair<std::string, int>> kept;  // Path and its detached mount.
  auto close_kept = [&kept] {
    for (const auto& [path, fd] : kept) close(fd);
  };
  for (const std::string& w : writable) {
    if (w == dir || !IsUnder(w, dir)) continue;
    const int fd = static_cast<int>(
        syscall(SYS_open_tree, AT_FDCWD, w.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE));
    if (fd < 0) {
      log.Failed("hide_dir", "open_tree(" + w + ", CLONE)", errno, dir + " stays visible");
      close_kept();
      return false;
    }
    kept.emplace_back(w, fd);
  }
  const unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOEXEC | (kept.empty() ? MS_RDONLY : 0);
  // Beneath a kept directory's path, others may pass through but not list.
  if (mount("tmpfs", dir.c_str(), "tmpfs", flags, kept.empty() ? "size=4k" : "size=4k,mode=0711") != 0) {
    log.Failed("hide_dir", "mount(tmpfs, " + dir + ")", errno, dir + " stays visible");
    close_kept();
    return false;
  }
  bool ok = true;
  const int dir_fd = kept.empty() ? -1 : open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  for (const auto& [w, fd] : kept) {
    const int at = dir_fd < 0 ? -1 : OpenDirsIn(dir_fd, w.substr(dir.size()), true, 0711);
    if (at < 0) {
      log.Failed("hide_dir", "mkdir -p " + w + " in the tmpfs over " + dir, errno, w + " is not reachable");
      ok = false;
      break;
    }
    if (syscall(SYS_move_mount, fd, "", at, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0) {
      log.Failed("hide_dir", "move_mount(" + w + ") into the tmpfs over " + dir, errno, w + " is not reachable");
      ok = false;
    }
    close(at);
    if (!ok) break;
  }
  if (dir_fd >= 0) close(dir_fd);
  close_kept();
  if (!ok) {  // A workspace the process cannot reach is worse than siblings it can: the tmpfs goes.
    if (umount2(dir.c_str(), MNT_DETACH) != 0) {
      log.Failed("hide_dir", "umount2(" + dir + ")", errno, "the workspace beneath it is not reachable");
    } else {
      log.Note("hide_dir: the tmpfs over " + dir + " taken off again: " + dir + " stays visible");
    }
    return false;
  }
  if (!kept.empty() && SetMountAttr(dir.c_str(), false, MOUNT_ATTR_RDONLY, 0) != 0) {
    log.Failed("hide_dir", "mount_setattr(" + dir + ", RDONLY)", errno, "the tmpfs over " + dir + " stays writable");
    ok = false;
  }
  return ok;
}

}  // namespace

bool SetupMounts(const KrPolicy& p, StepLog& log) {
  bool ok = true;
  // Our mount events must not propagate back to the host's table.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    log.Failed("mount_private", "mount(/, MS_REC|MS_PRIVATE)", errno,
               "cannot change mounts: no read-only view, no scratch");
    return false;
  }
  const std::vector<std::string> writable = SplitColons(p.writable_dirs);
  // The identity (if any) must read its job dirs and write its writable ones.
  for (const std::string& dir : SplitColons(p.job_ro_dirs)) {
    struct stat st;
    if (p.run_as_uid > 0 && lstat(dir.c_str(), &st) == 0) HandTreeTo(dir, p.run_as_uid, p.run_as_gid, st.st_dev, 0);
  }
  // New mounts first: they are ours, so their read-only bit can be cleared later.
  for (const std::string& dir : writable) {
    struct stat st;
    if (p.run_as_uid > 0 && lstat(dir.c_str(), &st) == 0) HandTreeTo(dir, p.run_as_uid, p.run_as_gid, st.st_dev, 0);
    if (mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
      log.Failed("bind_writable", "mount(" + dir + ", MS_BIND)", errno, dir + " stays as the host has it");
      ok = false;
    }
  }
  if (p.scratch_dir != nullptr && p.scratch_dir[0] != '\0') {
    std::string opts = "size=" + std::to_string(p.scratch_bytes > 0 ? p.scratch_bytes : (64ll << 20)) + ",mode=0700";
    if (p.run_as_uid > 0) opts += ",uid=" + std::to_string(p.run_as_uid) + ",gid=" + std::to_string(p.run_as_gid);
    if (mount("tmpfs", p.scratch_dir, "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
      log.Failed("scratch_tmpfs", std::string("mount(tmpfs, ") + p.scratch_dir + ")", errno,
                 "scratch is not size-capped (RLIMIT_FSIZE still caps each file)");
      ok = false;
    } else {
      log.Ok("scratch_tmpfs");
      // /dev/shm is the scratch too, as in the constructed root: shared
      // memory a library makes stays inside the job's capped tmpfs and stays
      // writable under the read-only root below.
      struct stat st;
      if (p.readonly_root && stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) &&
          mount(p.scratch_dir, "/dev/shm", nullptr, MS_BIND, nullptr) != 0) {
        log.Failed("dev_shm", std::string("mount(") + p.scratch_dir + ", /dev/shm, MS_BIND)", errno,
                   "/dev/shm is the host's (read-only under readonly_root)");
      }
    }
  }
  for (const std::string& dir : SplitColons(p.hidden_dirs)) ok &= HideDir(dir, writable, log);
  if (p.mount_proc) {
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
      log.Failed("proc", "mount(proc, /proc)", errno,
                 "the old /proc stays: host processes are listed (but not signalable across pid ns)");
      ok = false;
    } else {
      log.Ok("proc");
    }
  }
  if (p.readonly_root) {
    if (SetMountAttr("/", true, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0) != 0) {
      log.Failed("readonly_root", "mount_setattr(/, AT_RECURSIVE, RDONLY)", errno,
                 "filesystem stays writable where the host allows");
      ok = false;
    } else {
      log.Ok("readonly_root");
      // Re-open the holes we own. A locked (host-owned) mount would refuse, but
      // these were created above in our own namespace.
      if (p.scratch_dir != nullptr && p.scratch_dir[0] != '\0' &&
          SetMountAttr(p.scratch_dir, false, 0, MOUNT_ATTR_RDONLY) != 0) {
        log.Failed("scratch_rw", std::string("mount_setattr(") + p.scratch_dir + ", clr RDONLY)", errno,
                   "scratch is read-only");
        ok = false;
      }
      for (const std::string& dir : writable) {
        if (SetMountAttr(dir.c_str(), true, 0, MOUNT_ATTR_RDONLY) != 0) {
          log.Failed("writable_rw", "mount_setattr(" + dir + ", clr RDONLY)", errno, dir + " is read-only");
          ok = false;
        }
      }
      if (p.scratch_dir != nullptr && p.scratch_dir[0] != '\0') SetMountAttr("/dev/shm", false, 0, MOUNT_ATTR_RDONLY);
      ok &= ReopenProc(log);
    }
  }
  return ok;
}

}  // namespace kernelrl::sandbox
