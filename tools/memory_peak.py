#!/usr/bin/env python3
"""What is alive at the peak of a CUDA allocator history (fsdp_bench
--memory_trace): replays the allocations recorded during one step, finds
the moment the step's own allocations peak, and lists the blocks alive
then, grouped by the kernelrl frames that allocated them.

    python3 tools/memory_peak.py TRACE.pickle [--top N]
"""
import argparse
import collections
import pickle


def frames_key(frames, depth=4):
    ours = [f["name"] for f in frames if "kernelrl" in f["name"]]
    ops = [f["name"] for f in frames if f["name"].startswith("at::") and "::native::" not in f["name"]]
    op = ops[0] if ops else "?"
    return op.split("(")[0] + " <- " + " <- ".join(n.split("(")[0] for n in ours[:depth])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    snap = pickle.load(open(a.trace, "rb"))
    traces = snap["device_traces"]
    dev = max(range(len(traces)), key=lambda i: len(traces[i]))
    events = traces[dev]
    alive, live, peak, peak_at = {}, 0, 0, 0
    for i, e in enumerate(events):
        if e["action"] == "alloc":
            alive[e["addr"]] = e
            live += e["size"]
            if live > peak:
                peak, peak_at = live, i
        elif e["action"] == "free_requested" and e["addr"] in alive:
            live -= alive.pop(e["addr"])["size"]
    alive, live = {}, 0
    for e in events[: peak_at + 1]:
        if e["action"] == "alloc":
            alive[e["addr"]] = e
        elif e["action"] == "free_requested":
            alive.pop(e["addr"], None)
    groups = collections.defaultdict(lambda: [0, 0])
    for e in alive.values():
        k = frames_key(e.get("frames", []))
        groups[k][0] += e["size"]
        groups[k][1] += 1
    at_peak = events[peak_at]
    print(f"device {dev}: {len(events)} events; the step's allocations peak at {peak / 2**30:.2f} GiB "
          f"(event {peak_at}, allocating {at_peak['size'] / 2**20:.1f} MiB in {frames_key(at_peak.get('frames', []))})")
    for k, (size, n) in sorted(groups.items(), key=lambda kv: -kv[1][0])[: a.top]:
        print(f"  {size / 2**30:8.3f} GiB  {n:5d} blocks  {k}")


if __name__ == "__main__":
    main()
