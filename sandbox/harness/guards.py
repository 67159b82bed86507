"""In-process guards of the candidate process. They are defence in depth:
correctness is decided in the reference process, which the candidate cannot
reach; these guards turn the known ways of faking speed or correctness into
explicit flags (HACK_DETECTED / SANDBOX_VIOLATION) instead of silent passes.

- TorchOpGuard: a dispatch mode active while ModelNew.forward runs; every ATen
  op outside a small allow-list (allocation, views, fills) is recorded and
  refused, including ops issued from C++ extensions on the same thread.
- AuditGuard: a PEP 578 audit hook (irremovable) that refuses and records
  sockets, subprocesses, forks and writes outside the writable directories.
- PatchSnapshot: identities of torch/timer/harness attributes; any change
  after the candidate imported or ran is a monkey-patch.
- thread_count(): new threads during import/forward escape the dispatch mode.
"""
import os
import sys
import time
import types

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

# Allocation, metadata/view and fill ops: everything else is compute.
ALLOWED_OPS = frozenset("""
empty empty_like empty_strided new_empty new_empty_strided empty_permuted
zeros zeros_like ones ones_like full full_like new_zeros new_ones new_full zero_ fill_
view _unsafe_view _reshape_alias as_strided permute transpose t unsqueeze squeeze expand
select slice narrow split split_with_sizes unbind chunk alias detach lift_fresh
view_as_real view_as_complex unfold diagonal movedim _local_scalar_dense
sym_size sym_stride sym_numel sym_storage_offset is_same_size record_stream
""".split())


class TorchOpForbidden(RuntimeError):
    pass


class TorchOpGuard(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.violations = []

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        if func.overloadpacket.__name__ not in ALLOWED_OPS:
            self.violations.append(str(func))
            raise TorchOpForbidden(f"torch operator {func} called inside ModelNew.forward: "
                                   "write the computation as your own kernel")
        return func(*args, **(kwargs or {}))


class NoGuard:
    """The baseline executors' stand-in for TorchOpGuard (the task's own Model
    is all torch ops): the same calls around forward, no dispatch mode."""
    violations = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def guard_still_active(guard):
    if isinstance(guard, NoGuard):
        return True
    return _get_current_dispatch_mode() is guard


def clear_dispatch_modes():
    """After a candidate tampered with the mode stack: leave it empty."""
    from torch.utils._python_dispatch import _pop_mode
    while _get_current_dispatch_mode() is not None:
        _pop_mode()


class Guarded:
    """The op guard around the candidate's forwards (eager or captured).
    Afterwards, also when a forward raised, `active` says whether the guard
    was still on the mode stack; if not, the stack is left empty."""

    def __init__(self, guard):
        self.guard, self.active = guard, True

    def __enter__(self):
        self.guard.__enter__()
        return self

    def __exit__(self, *exc):
        self.active = guard_still_active(self.guard)
        if self.active:
            self.guard.__exit__(None, None, None)
        else:
            clear_dispatch_modes()
        return False


class AuditGuard:
    """Install once; Python offers no way to remove an audit hook."""

    def __init__(self, writable_dirs):
        self.writable = [os.path.realpath(d) + os.sep for d in writable_dirs if d]
        self.violations = []
        self.armed = False

    def install(self):
        sys.addaudithook(self._hook)

    def _violation(self, what):
        self.violations.append(what)
        raise PermissionError(f"sandbox: {what} is not allowed")

    def _hook(self, event, args):
        if not self.armed:
            return
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                      (isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))
            if writing and isinstance(path, (str, bytes)):
                p = os.path.realpath(os.fsdecode(path))
                if not any((p + os.sep).startswith(w) for w in self.writable):
                    self._violation(f"write to {p}")
        elif event.startswith("socket.") and event != "socket.getservbyname":
            self._violation(f"network ({event})")
        elif event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                       "os.fork", "os.forkpty", "pty.spawn", "os.kill", "os.killpg"):
            self._violation(f"process control ({event})")
        elif event in ("sys.remote_exec", "sys.setprofile", "sys.settrace"):
            self._violation(f"tracing ({event})")


def _owners():
    import torch.nn.functional as F
    import _thread
    import threading
    owners = [time, _thread, threading, torch, F, torch.Tensor, torch._C.TensorBase, torch.linalg, torch.fft,
              torch.special, torch.nn.Module, torch._C._VariableFunctions]
    if hasattr(torch, "cuda"):
        owners += [torch.cuda, torch.cuda.Event, torch.cuda.Stream]
    return owners


class PatchSnapshot:
    """Identity of every attribute in the owners' own __dict__ (no lazy lookups,
    so taking the snapshot never imports anything)."""

    def __init__(self, extra_modules=()):
        self.owners = [o for o in _owners() + list(extra_modules) if hasattr(o, "__dict__")]
        self.ids = [{n: id(v) for n, v in list(vars(o).items())} for o in self.owners]
        self.modules = {name: sys.modules.get(name) for name in
                        ["torch", "time", "torch.nn.functional"] + [m.__name__ for m in extra_modules]}

    def changed(self):
        out = []
        for owner, before in zip(self.owners, self.ids):
            now = vars(owner)
            for n, ident in before.items():
                if n in ("__annotations__",):
                    continue
                if id(now.get(n)) != ident:
                    out.append(f"{getattr(owner, '__name__', '?')}.{n}")
        for name, mod in self.modules.items():
            if sys.modules.get(name) is not mod:
                out.append(f"sys.modules[{name}]")
        return out


class ThreadGuard:
    """Python threads escape the (thread-local) dispatch mode, so starting one
    is refused and recorded. The wrappers are in the patch snapshot: undoing
    them is itself a monkey-patch."""

    def __init__(self):
        self.attempts = []

    def install(self):
        import _thread
        import threading
        real = _thread.start_new_thread

        def refuse(*args, **kwargs):
            self.attempts.append(repr(args[0])[:80] if args else "?")
            raise RuntimeError("sandbox: starting threads is not allowed in a candidate")

        _thread.start_new_thread = refuse
        _thread.start_joinable_thread = refuse if hasattr(_thread, "start_joinable_thread") else None
        threading._start_new_thread = refuse
        if hasattr(threading, "_start_joinable_thread"):
            threading._start_joinable_thread = refuse
        self._real = real


def thread_count():
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading
        return threading.active_count()
