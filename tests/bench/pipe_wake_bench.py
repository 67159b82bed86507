"""How long the other process takes to see a message: asleep on a pipe,
polling the pipe, or polling a shared page first (protocol.Doorbell, what the
two waits inside the reference's clock do: the executor's for "go", ours for
"done").

A parent and a child ping-pong one JSON line at a time over pipes, the parent
idle for GAP between rounds (the host's cores may drop into deep idle states, as
they do while a block's copies and forwards run on the GPU); printed: the
one-way latency's p50 and p90 (CLOCK_MONOTONIC, one clock for both processes).

    python3 tests/bench/pipe_wake_bench.py [rounds=400] [gap_ms=3]
"""
import os
import select
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "sandbox", "harness"))
import protocol  # noqa: E402


def wait(mode, fd, bell, slot, seq):
    if mode == "poll":
        while not select.select([fd], [], [], 0)[0]:
            pass
    elif mode == "page":
        bell.wait(slot, seq, protocol.CLOCK_SPIN_S, fd)


def send(mode, fd, bell, slot, seq, msg):
    protocol.send(fd, msg)
    if mode == "page":
        bell.ring(slot, seq)  # the message first, then the bell


def series(rounds, gap, mode, path):
    p2c, c2p = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(p2c[1])
        os.close(c2p[0])
        bell = protocol.Doorbell(path)
        reader = protocol.LineReader(p2c[0])
        seq = 0
        while True:
            seq += 1
            wait(mode, p2c[0], bell, protocol.Doorbell.GO, seq)
            msg = reader.read()
            woke = time.monotonic()
            if msg is None or msg.get("type") != "ping":
                os._exit(0)
            send(mode, c2p[1], bell, protocol.Doorbell.DONE, seq,
                 {"type": "pong", "woke": woke, "sent": time.monotonic()})
    os.close(p2c[0])
    os.close(c2p[1])
    bell = protocol.Doorbell(path)
    reader = protocol.LineReader(c2p[0])
    there, back = [], []
    for seq in range(1, rounds + 1):
        time.sleep(gap)
        at = time.monotonic()
        send(mode, p2c[1], bell, protocol.Doorbell.GO, seq, {"type": "ping"})
        wait(mode, c2p[0], bell, protocol.Doorbell.DONE, seq)
        pong = reader.read()
        got = time.monotonic()
        if seq > 10:  # warm-up rounds left out
            there.append((pong["woke"] - at) * 1e6)
            back.append((got - pong["sent"]) * 1e6)
    protocol.send(p2c[1], {"type": "stop"})
    bell.ring(protocol.Doorbell.GO, rounds + 1)
    os.waitpid(pid, 0)
    return there, back


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    gap = float(sys.argv[2]) / 1e3 if len(sys.argv) > 2 else 3e-3
    print(f"one-way message latency, {rounds} rounds, {gap * 1e3:.1f} ms idle between them (us)")
    p50 = {}
    with tempfile.TemporaryDirectory() as d:
        for mode, name in (("sleep", "asleep on the pipe"), ("poll", "polling the pipe"),
                           ("page", "polling a page")):
            path = os.path.join(d, f"{mode}.bell")
            protocol.Doorbell(path, create=True)
            there, back = series(rounds, gap, mode, path)
            both = there + back
            p50[mode] = statistics.median(both)
            print(f"  {name:18s} p50 {p50[mode]:7.1f}  p90 {statistics.quantiles(both, n=10)[8]:7.1f}  "
                  f"(there p50 {statistics.median(there):.1f}, back p50 {statistics.median(back):.1f})")
    print(f"  per wait, against sleeping: polling the pipe saves {p50['sleep'] - p50['poll']:.1f} us, "
          f"a page {p50['sleep'] - p50['page']:.1f} us; a block has two such waits inside the clock")


if __name__ == "__main__":
    main()
