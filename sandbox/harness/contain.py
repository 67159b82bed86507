"""ctypes bridge to libkernelrl_contain.so: the harness forks, the C++ library
isolates (sandbox/contain/contain.h holds the sequence and its rationale)."""
import ctypes
import os

KR_SECCOMP_NONE, KR_SECCOMP_CANDIDATE, KR_SECCOMP_COMPILER = 0, 1, 2

CAPS = {
    "user_ns": 1 << 0, "pid_ns": 1 << 1, "net_ns": 1 << 2, "mount_ns": 1 << 3,
    "ipc_ns": 1 << 4, "tmpfs": 1 << 5, "ro_remount": 1 << 6, "proc_mount": 1 << 7,
    "seccomp": 1 << 8, "uts_ns": 1 << 9,
}


class KrPolicy(ctypes.Structure):
    # Field order mirrors sandbox/contain/policy.h exactly.
    _fields_ = [
        ("user_ns", ctypes.c_int), ("pid_ns", ctypes.c_int), ("net_ns", ctypes.c_int),
        ("mount_ns", ctypes.c_int), ("ipc_ns", ctypes.c_int), ("uts_ns", ctypes.c_int),
        ("readonly_root", ctypes.c_int), ("mount_proc", ctypes.c_int),
        ("scratch_dir", ctypes.c_char_p), ("scratch_bytes", ctypes.c_longlong),
        ("writable_dirs", ctypes.c_char_p), ("hidden_dirs", ctypes.c_char_p),
        ("cpu_seconds", ctypes.c_longlong), ("data_bytes", ctypes.c_longlong),
        ("as_bytes", ctypes.c_longlong), ("fsize_bytes", ctypes.c_longlong),
        ("nofile", ctypes.c_longlong), ("core_bytes_plus1", ctypes.c_longlong),
        ("close_fds", ctypes.c_int), ("keep_fds", ctypes.POINTER(ctypes.c_int)),
        ("num_keep_fds", ctypes.c_int),
        ("new_process_group", ctypes.c_int), ("parent_death_signal", ctypes.c_int),
        ("seccomp_profile", ctypes.c_int),
    ]


class KrSuperviseResult(ctypes.Structure):
    # Field order mirrors KrSuperviseResult in sandbox/contain/c_api.cc.
    _fields_ = [
        ("exit_code", ctypes.c_int), ("term_signal", ctypes.c_int), ("timed_out", ctypes.c_int),
        ("memory_exceeded", ctypes.c_int), ("wall_ms", ctypes.c_double), ("cpu_ms", ctypes.c_double),
        ("memory_at_kill_bytes", ctypes.c_longlong), ("peak_memory_bytes", ctypes.c_longlong),
        ("memory_samples", ctypes.c_int),
    ]


class Contain:
    """Loads the library once (in the zygote, before any fork)."""

    def __init__(self, lib_path):
        self.lib = ctypes.CDLL(lib_path)
        self.lib.kr_contain_phase.restype = ctypes.c_int
        self.lib.kr_contain_phase.argtypes = [ctypes.POINTER(KrPolicy), ctypes.c_int,
                                              ctypes.c_char_p, ctypes.c_int]
        self.lib.kr_probe_host.restype = ctypes.c_int
        self.lib.kr_supervise.argtypes = [ctypes.c_int, ctypes.c_double, ctypes.c_longlong, ctypes.c_double,
                                          ctypes.c_int, ctypes.POINTER(KrSuperviseResult)]
        self.lib.kr_cgroup_probe.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
        self.lib.kr_cgroup_create.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_longlong,
                                              ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        self.lib.kr_cgroup_enter.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
        self.lib.kr_cgroup_remove.restype = ctypes.c_longlong
        self.lib.kr_cgroup_remove.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_longlong)]

    def probe(self):
        caps = self.lib.kr_probe_host()
        return {name: bool(caps & bit) for name, bit in CAPS.items()}

    def phase(self, policy, phase):
        """Runs one phase; returns (failures, step log text)."""
        buf = ctypes.create_string_buffer(8192)
        failures = self.lib.kr_contain_phase(ctypes.byref(policy), phase, buf, len(buf))
        return failures, buf.value.decode(errors="replace")

    def supervise(self, pid, wall_seconds, memory_cap_bytes=0, memory_poll_ms=10.0, proc_fd=-1):
        """Waits for `pid` with a wall limit and, with memory_cap_bytes > 0, a cap
        on the resident host memory of its process tree (both kill the group).
        proc_fd: /proc opened before the fork (the candidate remounts /proc)."""
        r = KrSuperviseResult()
        self.lib.kr_supervise(pid, wall_seconds, int(memory_cap_bytes), float(memory_poll_ms), proc_fd,
                              ctypes.byref(r))
        return {"exit_code": r.exit_code, "signal": r.term_signal, "timed_out": bool(r.timed_out),
                "memory_exceeded": bool(r.memory_exceeded), "memory_at_kill_bytes": r.memory_at_kill_bytes,
                "peak_memory_bytes": r.peak_memory_bytes, "memory_samples": r.memory_samples,
                "wall_ms": r.wall_ms, "cpu_ms": r.cpu_ms}

    # cgroup v2 memory backstop (sandbox/contain/host_memory.h).
    def cgroup_probe(self, parent):
        """"" when candidates can get a memory cgroup under `parent`, else why not."""
        why = ctypes.create_string_buffer(512)
        rc = self.lib.kr_cgroup_probe(parent.encode(), why, len(why))
        return "" if rc == 0 else (why.value.decode(errors="replace") or "unknown error")

    def cgroup_create(self, parent, name, max_bytes):
        """(path, "") or ("", why)."""
        path, why = ctypes.create_string_buffer(4096), ctypes.create_string_buffer(512)
        rc = self.lib.kr_cgroup_create(parent.encode(), name.encode(), int(max_bytes), path, len(path), why, len(why))
        return (path.value.decode(), "") if rc == 0 else ("", why.value.decode(errors="replace"))

    def cgroup_enter(self, path):
        why = ctypes.create_string_buffer(512)
        return "" if self.lib.kr_cgroup_enter(path.encode(), why, len(why)) == 0 else why.value.decode(errors="replace")

    def cgroup_remove(self, path):
        """Removes the cgroup; returns (oom_kill count or -1, memory.peak or -1)."""
        peak = ctypes.c_longlong(-1)
        kills = self.lib.kr_cgroup_remove(path.encode(), ctypes.byref(peak))
        return kills, peak.value


def make_policy(iso, **fields):
    """KrPolicy from the job's isolation switches (iso: dict name -> bool) plus fields.
    The returned object keeps the byte strings it points to alive."""
    p = KrPolicy()
    for ns in ("user_ns", "pid_ns", "net_ns", "mount_ns", "ipc_ns", "uts_ns"):
        setattr(p, ns, int(bool(iso.get(ns, False))))
    keep = fields.pop("keep_fds", None)
    p._keep_alive = []
    for key, value in fields.items():
        if isinstance(value, str):
            value = value.encode()
            p._keep_alive.append(value)
        setattr(p, key, value)
    if keep is not None:
        arr = (ctypes.c_int * len(keep))(*keep)
        p._keep_alive.append(arr)
        p.keep_fds = arr
        p.num_keep_fds = len(keep)
        p.close_fds = 1
    return p


def default_lib_path():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.environ.get("KERNELRL_CONTAIN_LIB", os.path.join(here, "libkernelrl_contain.so"))
