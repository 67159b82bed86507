"""JSON-lines over pipes between the zygote, the reference process and the
candidate process. Every message is one line; the reader caps line length so
a hostile writer cannot exhaust the trusted side's memory."""
import json
import mmap
import os
import select
import struct
import time

MAX_LINE = 1 << 20
# The longest a wait inside the reference's clock polls before it sleeps on
# the pipe (Doorbell.wait): longer than a block's forwards take (~30 ms).
CLOCK_SPIN_S = 0.25


class CandidateGone(Exception):
    """The candidate process stopped answering, or reported an error."""


class LineReader:
    def __init__(self, fd):
        self.fd = fd
        self.buf = b""
        self.eof = False

    def read(self, timeout=None):
        """Next decoded message, or None on EOF / timeout / oversized line."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buf:
            if self.eof or len(self.buf) > MAX_LINE:
                return None
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.fd], [], [], wait)
            if not ready:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                self.eof = True
                continue
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        try:
            msg = json.loads(line.decode())
            return msg if isinstance(msg, dict) else {"type": "garbage"}
        except (ValueError, UnicodeDecodeError):
            return {"type": "garbage"}


class Doorbell:
    """Two counters in a page both processes map (a file in the exchange
    directory): the waits inside the reference's clock, the executor's for
    "go" and ours for "done", poll one instead of sleeping on the pipe. The
    messages still travel on the pipes, written before the counter moves: a
    counter only ends a wait early. Each side writes one counter and the
    executor can write both, which gains it nothing: a wait that ends before
    its message is there goes on reading the pipe.

    Why: a process asleep on a pipe saw a message 68-78 us (p50) after the
    write on an idle H200 host, one polling saw it after ~30 us
    (tests/bench/pipe_wake_bench.py)."""

    FILE = "doorbell"
    GO, DONE = 0, 64  # byte offsets: one cache line each
    SIZE = 4096

    def __init__(self, path, create=False):
        if create:
            with open(path, "wb") as f:
                f.truncate(self.SIZE)
            os.chmod(path, 0o666)  # the executor runs as another uid
        fd = os.open(path, os.O_RDWR)
        try:
            self.page = mmap.mmap(fd, self.SIZE)
        finally:
            os.close(fd)

    def ring(self, slot, value):
        struct.pack_into("q", self.page, slot, value)

    def wait(self, slot, value, spin, fd):
        """Polls until the counter at `slot` reads `value`, for `spin` seconds
        at most or until `fd` has something to read (an error, EOF). True when
        it rang."""
        until = time.monotonic() + spin
        while True:
            for _ in range(256):
                if struct.unpack_from("q", self.page, slot)[0] == value:
                    return True
            if time.monotonic() > until or select.select([fd], [], [], 0)[0]:
                return struct.unpack_from("q", self.page, slot)[0] == value


def send(fd, msg):
    data = (json.dumps(msg) + "\n").encode()
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class Timeline:
    """Where a process's wall goes, for the verdict's timing line: time summed
    per named step, and when the process started after the job did (the
    zygote stamps the job with time.monotonic(); CLOCK_MONOTONIC is one clock
    for every process on the host)."""

    def __init__(self, job_t0=None):
        self.last = time.monotonic()
        self.start_ms = (self.last - job_t0) * 1e3 if job_t0 else 0.0
        self.steps = {}

    def mark(self, name):
        """Charges the time since the previous mark to `name`."""
        now = time.monotonic()
        step = self.steps.setdefault(name, [0.0, 0])
        step[0] += (now - self.last) * 1e3
        step[1] += 1
        self.last = now

    def report(self):
        return {"start_ms": round(self.start_ms, 1),
                "steps": [[name, round(ms, 1), n] for name, (ms, n) in self.steps.items()]}


def format_timeline(report):
    """'+12 ms: cuda 380, inputs 95 (5x), ...' from Timeline.report()."""
    if not isinstance(report, dict) or not isinstance(report.get("steps"), list):
        return "n/a"
    parts = []
    for step in report["steps"][:40]:
        try:
            name, ms, n = str(step[0])[:24], float(step[1]), int(step[2])
        except (TypeError, ValueError, IndexError):
            continue
        parts.append(f"{name} {ms:.0f}" + (f" ({n}x)" if n > 1 else ""))
    return f"+{float(report.get('start_ms', 0)):.0f} ms: " + ", ".join(parts)
