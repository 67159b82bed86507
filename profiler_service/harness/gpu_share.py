"""Whether another process ran GPU work while the reference process timed
blocks: the load signal behind the `device_shared` decline.

A second process's kernels time-slice with ours: every trusted figure grows
(2-50x measured on the H100 with 8192^2 GEMMs beside an honest ReLU), and the
drift anchor, timed with events inside our own context, does not see it. So
the reference process asks the driver itself, through its own NVML handle,
at the start of the profile stage, every few blocks and at its end:

  holders   the pids holding a context on the GPU at each poll
            (nvmlDeviceGetComputeRunningProcesses; the driver reports them in
            the caller's pid namespace where it can);
  own       the reference process (os.getpid()) and the holders descending
            from the worker, its parent's parent (this job's executor under its
            supervisor, and the processes of the worker's other jobs that wait
            for their turn in our code, their GPU work finished: while a clock
            runs no other job's candidate code is alive, sandbox/gpu_turns.h),
            by /proc's parent links;
  busy      the pids in nvmlDeviceGetProcessUtilization's samples from shortly
            before the stage on, with SM or memory utilisation >= min_util.

decide() counts the foreign processes: busy, not own, and holding a context
while the stage ran (a process that exited before it, such as the previous
job's executor, does not count). When the two queries' pids are not comparable
with ours (some drivers report the samples, or both lists, in the host's pid
namespace), ours are two of the busy ones and of each poll's holders, and the
rest count. Any foreign process declines the verdict (the judge's
`device_shared`).

The sandbox's health probe (sandbox/harness/device_memory.py) uses the same
ownership rule for device memory: foreign_memory() is what NVML attributes to
the processes that provably do not descend from the zygote.

Nothing here runs in the executor: it cannot add a process (no fork there),
make another one busy, or edit what the driver tells the reference process;
its extra contexts share its pid. Without NVML the check cannot run (`how`
says "unavailable") and nothing is declined. Not seen: a process in a pid
namespace the reference cannot see, on a driver that drops such pids.
"""
import os
import time

OWN_PROCESSES = 2  # the reference process and the executor hold contexts; the zygote never does


def parent_of(pid, proc="/proc"):
    """`pid`'s parent by /proc/<pid>/stat; None if it cannot be read."""
    try:
        with open(os.path.join(proc, str(pid), "stat")) as f:
            stat = f.read()
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        return int(stat[stat.rfind(")") + 2:].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def ancestry(pid, ancestor, proc="/proc", depth=64):
    """True if `ancestor` is `pid` or one of its ancestors (by /proc/<pid>/stat's
    ppid); False if the parent links from `pid` reach pid 1 without meeting it;
    None if a link cannot be read (the process or a parent exited, or lives in
    a pid namespace we cannot see) or the chain is longer than `depth`."""
    for _ in range(depth):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        pid = parent_of(pid, proc)
        if pid is None:
            return None
    return None


def descends_from(pid, ancestor, proc="/proc", depth=8):
    """True if `ancestor` is `pid` or one of its ancestors (by /proc/<pid>/stat's ppid)."""
    return ancestry(pid, ancestor, proc, depth) is True


def foreign_memory(me, zygote, used_by_pid, proc="/proc"):
    """(bytes, pids, why_not): the device memory NVML attributes to processes
    that are provably not the zygote's (/proc's parent links reach pid 1
    without meeting it). me: a process of ours holding a context now, the
    proof that NVML's pids are in our namespace; used_by_pid: {pid: bytes or
    None} (nvml.Processes.used_memory). A pid whose ancestry cannot be read
    counts as ours. bytes is None, with why_not, where the pids do not compare
    (me is not among them) or a foreign process has no memory figure."""
    if me not in used_by_pid:
        return None, [], f"NVML's pids are not comparable with ours (the probe's pid {me} is not among them)"
    total, pids = 0, []
    for pid, used in sorted(used_by_pid.items()):
        if ancestry(pid, zygote, proc) is not False:
            continue
        if used is None:
            return None, [], f"NVML gives no memory figure for pid {pid}"
        total += used
        pids.append(pid)
    return total, pids, ""


def decide(me, own, holders, samples, min_util=1):
    """(count, pids, how) of foreign processes. me: our pid; own: our pids
    (me included); holders: one set of context-holding pids per poll; samples:
    (pid, sm_util, mem_util) tuples. `pids` names them where pids compare
    ("pid"), else is empty ("count")."""
    busy = {pid for pid, sm, mem in samples if sm >= min_util or mem >= min_util}
    comparable = any(me in h for h in holders)  # the holders are in our pid namespace
    if comparable:
        foreign_holders = set().union(*holders) - own
        holder_count = len(foreign_holders)
    else:
        foreign_holders = set()
        holder_count = max((len(h) - OWN_PROCESSES for h in holders), default=0)
    if comparable and len(own) >= OWN_PROCESSES:
        # Our samples say the lists compare; so does a busy pid that is one of
        # the other holders (a second process beside a short stage: the
        # driver's samples may have caught it and missed ours).
        other = sorted((busy - own) & foreign_holders)
        if busy & own or other:
            return len(other), other, "pid"
    return max(0, min(len(busy) - OWN_PROCESSES, holder_count)), [], "count"


class Monitor:
    """Polls the driver from begin() on; result() says how many other
    processes used the GPU meanwhile."""

    def __init__(self, nvml, me=None, worker=None, proc="/proc", clock=time.time, min_util=1, lookback_s=0.5):
        self.nvml, self.proc, self.clock, self.min_util = nvml, proc, clock, min_util
        self.lookback_s = lookback_s
        self.me = os.getpid() if me is None else me
        self.worker = (parent_of(os.getppid(), proc) or 0) if worker is None else worker
        self.since_us = 0
        self.samples, self.holders = [], []
        self.own = {self.me}
        self.error = ""

    def available(self):
        return self.nvml is not None and getattr(self.nvml, "available", False)

    def begin(self, not_before=0.0):
        # The driver samples every few hundred ms and a stage may be shorter:
        # samples from just before it count too (holding a context during the
        # stage is still required, so an exited process never counts). Never
        # from before `not_before` (Unix s): with the GPU lease, the samples
        # until then report the holders' work from before they paused.
        self.since_us = int(max(self.clock() - self.lookback_s, not_before) * 1e6)
        self.samples, self.holders = [], []
        self.poll()

    def poll(self):
        """Reads the holders and the samples the driver recorded since the
        last poll (its sample buffer is finite: called between blocks)."""
        if not self.available() or self.error:
            return
        try:
            running = set(self.nvml.running_pids())
            new = self.nvml.process_samples(self.since_us)
        except Exception as e:  # noqa: BLE001 - an NVML without these queries: unchecked, not declined
            self.error = f"{type(e).__name__}: {e}"[:200]
            return
        self.holders.append(running)
        self.own |= {p for p in running
                     if self.worker > 1 and p != self.worker and descends_from(p, self.worker, self.proc)}
        for pid, ts_us, sm, mem in new:
            self.samples.append((pid, sm, mem))
            self.since_us = max(self.since_us, int(ts_us))

    def result(self):
        """{"foreign_gpu_processes": n, "gpu_share_check": how} for the RawTimingRun."""
        if not self.available():
            why = getattr(self.nvml, "error", "") or "no NVML"
            return {"foreign_gpu_processes": 0, "gpu_share_check": f"unavailable: {why}"}
        self.poll()
        if self.error:
            return {"foreign_gpu_processes": 0, "gpu_share_check": f"unavailable: {self.error}"}
        n, pids, how = decide(self.me, self.own, self.holders, self.samples, self.min_util)
        note = f"{how}: {len(self.samples)} samples, {len(self.holders)} polls, own {sorted(self.own)}"
        if pids:
            note += f", foreign {pids[:8]}"
        return {"foreign_gpu_processes": n, "gpu_share_check": note}
