#!/usr/bin/env python3
"""Fails when a confinement test skipped on a host that has what it needs.

usage: confinement_skips.py TESTLOGS_DIR [--host=CAP=yes|no,...]
(--host replaces the probe's answers; the script's own test uses it.)

The sandbox's isolation tests skip when the host forbids a step (no user
namespaces in some containers, no cgroup v2). Their skip decision comes from
the sandbox's own capability probe, so a wrong probe would let CI pass with
confinement untested. This script probes the host independently, with
util-linux `unshare` and /proc and /sys, and checks every skipped case of the
confinement targets against it: a skip whose reason names a capability the
host has is a failure. It prints every confinement skip with its reason and
the host's answer, so a CI log says which isolation tests did not run and why.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_summary import skips_in  # noqa: E402  (one parser of skips)

TARGETS = [
    "//sandbox/contain:contain_test",
    "//sandbox/contain:root_test",
    "//sandbox:confine_cpu_test",
    "//sandbox:exploits_cpu_test",
    "//sandbox:isolation_calibration_test",
]

# Skip-reason words -> the host capabilities the skipped case needed.
NEEDS = [
    ("net namespace", ["user_ns", "net_ns"]),
    ("mount namespace", ["user_ns", "mount_ns"]),
    ("read-only remount", ["user_ns", "mount_ns"]),
    ("pid namespace", ["user_ns", "mount_ns", "pid_ns_proc"]),
    ("fresh /proc", ["user_ns", "mount_ns", "pid_ns_proc"]),
    ("seccomp", ["seccomp"]),
    ("pivot_root", ["user_ns", "mount_ns"]),
    ("constructed root", ["user_ns", "mount_ns"]),
    ("part of the confinement", ["user_ns", "mount_ns", "pid_ns_proc", "net_ns", "seccomp"]),
    ("cgroup", ["cgroup_v2_memory"]),
]


def runs(*cmd):
    try:
        return subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def probe():
    """The host's capabilities, probed without the sandbox's code."""
    caps = {
        "user_ns": runs("unshare", "--user", "--map-root-user", "true"),
        "mount_ns": runs("unshare", "--user", "--map-root-user", "--mount", "true"),
        "pid_ns_proc": runs("unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--mount-proc", "true"),
        "net_ns": runs("unshare", "--user", "--map-root-user", "--net", "true"),
    }
    try:
        with open("/proc/self/status") as f:
            caps["seccomp"] = any(l.startswith("Seccomp:") for l in f)
    except OSError:
        caps["seccomp"] = False
    try:
        with open("/sys/fs/cgroup/cgroup.controllers") as f:
            caps["cgroup_v2_memory"] = "memory" in f.read().split()
    except OSError:
        caps["cgroup_v2_memory"] = False
    return caps


def needs_of(reason):
    low = reason.lower()
    for words, needs in NEEDS:
        if words in low:
            return needs
    return None


def main(argv):
    if len(argv) not in (2, 3) or (len(argv) == 3 and not argv[2].startswith("--host=")):
        sys.stderr.write(__doc__)
        return 2
    if len(argv) == 3:
        caps = {k: v == "yes" for k, v in (kv.split("=") for kv in argv[2][len("--host="):].split(","))}
    else:
        caps = probe()
    print("confinement: host " + " ".join(f"{k}={'yes' if v else 'no'}" for k, v in sorted(caps.items())))
    wrong = 0
    for target in TARGETS:
        for case, reason in skips_in(argv[1], target):
            needs = needs_of(reason)
            if needs is None:
                print(f"confinement: {target} {case} skipped: {reason} (not a host capability)")
                continue
            missing = [n for n in needs if not caps.get(n, False)]
            if missing:
                print(f"confinement: {target} {case} skipped: {reason} (host lacks {', '.join(missing)})")
            else:
                print(f"confinement: FAIL {target} {case} skipped: {reason}, but the host has {', '.join(needs)}")
                wrong += 1
    if wrong:
        print(f"confinement: {wrong} skipped case(s) on a host that has what they need")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
