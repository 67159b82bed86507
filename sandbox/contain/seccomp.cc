// Seccomp-BPF filters. Violations kill the whole process (SIGSYS), which the
// supervisor reports as SANDBOX_VIOLATION; clone3 answers ENOSYS so libc falls
// back to clone(), whose flags a classic BPF filter can inspect.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include <cerrno>
#include <vector>

#include "sandbox/contain/steps.h"

namespace kernelrl::sandbox {
namespace {

#if defined(__x86_64__)
constexpr unsigned int kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr unsigned int kArch = AUDIT_ARCH_AARCH64;
#else
#error "seccomp filter: unsupported architecture"
#endif

class FilterBuilder {
 public:
  void LoadNr() { Stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)); }
  void LoadArg0Low() { Stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])); }
  void Stmt(unsigned short code, unsigned int k) { prog_.push_back(BPF_STMT(code, k)); }
  void Jump(unsigned short code, unsigned int k, unsigned char jt, unsigned char jf) {
    prog_.push_back(BPF_JUMP(code, k, jt, jf));
  }
  // if (nr == value) return action;
  void ReturnIfNr(long nr, unsigned int action) {
    Jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<unsigned int>(nr), 0, 1);
    Stmt(BPF_RET | BPF_K, action);
  }
  std::vector<sock_filter>& prog() { return prog_; }

 private:
  std::vector<sock_filter> prog_;
};

}  // namespace

bool InstallSeccomp(int profile, StepLog& log) {
  if (profile == KR_SECCOMP_NONE) return true;
  const unsigned int kKill = SECCOMP_RET_KILL_PROCESS;
  const unsigned int kAllow = SECCOMP_RET_ALLOW;
  FilterBuilder f;
  f.Stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
  f.Jump(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0);
  f.Stmt(BPF_RET | BPF_K, kKill);
  f.LoadNr();
  // Never needed by a kernel, a harness or a compiler.
  const long kForbidden[] = {
      SYS_ptrace, SYS_process_vm_readv, SYS_process_vm_writev, SYS_mount, SYS_umount2,
      SYS_pivot_root, SYS_chroot, SYS_unshare, SYS_setns, SYS_kexec_load, SYS_init_module,
      SYS_finit_module, SYS_delete_module, SYS_bpf, SYS_perf_event_open, SYS_keyctl, SYS_add_key,
      SYS_request_key, SYS_userfaultfd, SYS_reboot, SYS_swapon, SYS_swapoff, SYS_acct,
      SYS_settimeofday, SYS_clock_settime, SYS_open_by_handle_at, SYS_name_to_handle_at,
      SYS_mount_setattr, SYS_move_mount, SYS_open_tree, SYS_fsopen, SYS_fsmount, SYS_pidfd_getfd,
#if defined(__x86_64__)
      SYS_iopl, SYS_ioperm, SYS_kexec_file_load,
#endif
  };
  for (long nr : kForbidden) f.ReturnIfNr(nr, kKill);
  f.ReturnIfNr(SYS_clone3, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA));
  if (profile == KR_SECCOMP_CANDIDATE) {
#if defined(__x86_64__)
    f.ReturnIfNr(SYS_fork, kKill);
    f.ReturnIfNr(SYS_vfork, kKill);
#endif
    f.ReturnIfNr(SYS_execve, kKill);
    f.ReturnIfNr(SYS_execveat, kKill);
    // clone: threads (CLONE_THREAD) pass, new processes die.
    f.Jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 4);
    f.LoadArg0Low();
    f.Jump(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 0, 1);
    f.Stmt(BPF_RET | BPF_K, kAllow);
    f.Stmt(BPF_RET | BPF_K, kKill);
    f.LoadNr();
  }
  // socket: AF_UNIX only (local IPC some libraries use); any network family dies.
  f.Jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, 4);
  f.LoadArg0Low();
  f.Jump(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 0, 1);
  f.Stmt(BPF_RET | BPF_K, kAllow);
  f.Stmt(BPF_RET | BPF_K, kKill);
  f.LoadNr();
  f.Stmt(BPF_RET | BPF_K, kAllow);

  struct sock_fprog prog;
  prog.len = static_cast<unsigned short>(f.prog().size());
  prog.filter = f.prog().data();
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    log.Failed("seccomp", "prctl(PR_SET_SECCOMP)", errno,
               "no syscall filter: forks, sockets and ptrace are limited only by namespaces");
    return false;
  }
  log.Ok(profile == KR_SECCOMP_CANDIDATE ? "seccomp(candidate)" : "seccomp(compiler)");
  return true;
}

}  // namespace kernelrl::sandbox
