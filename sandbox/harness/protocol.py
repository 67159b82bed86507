"""JSON-lines over pipes between the zygote, the reference process and the
candidate process. Every message is one line; the reader caps line length so
a hostile writer cannot exhaust the trusted side's memory."""
import json
import os
import select
import time

MAX_LINE = 1 << 20


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


def send(fd, msg):
    data = (json.dumps(msg) + "\n").encode()
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
