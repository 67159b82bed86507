#!/usr/bin/env python3
"""The health probe's device-memory rule (device_memory.py) on CPU: a fake
/proc tree and a fake NVML stand in for the driver, a fake GPU's free bytes
follow from what each process holds. Pids and sizes are drawn at random.

    python3 device_memory_test.py"""
import os
import random
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", ".."))  # the repository root: profiler_service.harness

import device_memory  # noqa: E402
from profiler_service.harness import gpu_share_test  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30


def FakeProc(tree):
    """gpu_share_test's fake /proc over {pid: ppid}."""
    return gpu_share_test.FakeProc({pid: ("python3 (x) y", ppid) for pid, ppid in tree.items()})


class FakeNvml:
    """nvml.Processes' used_memory() over a fake GPU's processes; `shift`
    renumbers every pid (the driver reporting the host's pid namespace)."""

    def __init__(self, gpu, shift=0, unknown=(), fail=""):
        self.available, self.error = True, ""
        self.gpu, self.shift, self.unknown, self.fail = gpu, shift, set(unknown), fail

    def used_memory(self):
        if self.fail:
            raise OSError(self.fail)
        return {pid + self.shift: (None if pid in self.unknown else b) for pid, b in self.gpu.procs.items()}


class FakeGpu:
    def __init__(self):
        self.total = 80 * GiB
        self.reserved = random.randint(200, 700) * MiB  # the driver's own, no process's
        self.procs = {}

    def free(self):
        return self.total - self.reserved - sum(self.procs.values())


class Host:
    """Random distinct pids: the zygote (child of the worker), each probe,
    the supervisor and executor of a job, a learner beside the worker."""

    def __init__(self):
        p = random.sample(range(1000, 4_000_000), 8)
        self.worker, self.zygote, self.probe1, self.probe2, self.sup, self.exe, self.learner, self.shell = p
        self.proc = FakeProc({self.worker: self.shell, self.shell: 1, self.zygote: self.worker,
                              self.probe1: self.zygote, self.probe2: self.zygote,
                              self.sup: self.zygote, self.exe: self.sup, self.learner: self.shell})
        self.gpu = FakeGpu()
        self.slack = random.randint(256, 768) * MiB
        self.ctx = random.randint(400, 600) * MiB  # a probe's CUDA context

    def probe(self, me, nvml=None, why_not=""):
        """One probe: `me` holds a context while it measures, then exits."""
        self.gpu.procs[me] = self.ctx
        nvml = nvml if nvml is not None else FakeNvml(self.gpu)
        m = device_memory.measure(self.gpu.total, self.gpu.free(), nvml, me, self.zygote, self.proc.path, why_not)
        del self.gpu.procs[me]
        return m


class HealthMemoryTest(unittest.TestCase):
    def setUp(self):
        self.h = Host()
        self.addCleanup(self.h.proc.dir.cleanup)

    def baseline(self, **kw):
        b = self.h.probe(self.h.probe1, **kw)
        self.assertEqual(b["device_used"], self.h.gpu.reserved + self.h.ctx + sum(self.h.gpu.procs.values()))
        return b

    def test_foreign_process_after_baseline_stays_healthy(self):
        h = self.h
        base = self.baseline()
        h.gpu.procs[h.learner] = 1300 * MiB + random.randint(0, 64 * MiB)  # the learner's bf16 model
        now = h.probe(h.probe2)
        self.assertTrue(now["rule"].startswith("own processes"), now["rule"])
        self.assertIn(str(h.learner), now["rule"])
        ok, error = device_memory.check(base, now, h.slack)
        self.assertTrue(ok, error)
        self.assertEqual(error, "")

    def test_own_descendant_above_slack_fails(self):
        h = self.h
        h.gpu.procs[h.learner] = random.randint(1, 4) * GiB  # foreign, there at the baseline too
        base = self.baseline()
        h.gpu.procs[h.exe] = h.slack + random.randint(1, 512) * MiB  # an executor that did not go away
        now = h.probe(h.probe2)
        ok, error = device_memory.check(base, now, h.slack)
        self.assertFalse(ok)
        self.assertIn(f"not back to baseline: {h.gpu.procs[h.exe] >> 20} MiB more held by the sandbox's", error)

    def test_own_leak_is_seen_while_a_foreign_process_leaves(self):
        # The whole device nets out to less than at the baseline; ours grew.
        h = self.h
        h.gpu.procs[h.learner] = 3 * GiB
        base = self.baseline()
        del h.gpu.procs[h.learner]
        h.gpu.procs[h.exe] = h.slack + random.randint(1, 1024) * MiB
        now = h.probe(h.probe2)
        self.assertLess(now["device_used"], base["device_used"])
        self.assertFalse(device_memory.check(base, now, h.slack)[0])

    def test_own_memory_within_slack_is_healthy(self):
        h = self.h
        base = self.baseline()
        h.gpu.procs[h.exe] = random.randint(1, h.slack)
        ok, error = device_memory.check(base, h.probe(h.probe2), h.slack)
        self.assertTrue(ok, error)

    def test_incomparable_pids_fall_back_to_the_whole_device(self):
        h = self.h
        host_ns = FakeNvml(h.gpu, shift=random.randint(10**7, 10**8))  # none of NVML's pids is ours
        base = self.baseline(nvml=host_ns)
        self.assertIsNone(base["own_used"])
        h.gpu.procs[h.learner] = 1300 * MiB
        now = h.probe(h.probe2, nvml=host_ns)
        self.assertTrue(now["rule"].startswith("whole device: NVML's pids are not comparable"), now["rule"])
        ok, error = device_memory.check(base, now, h.slack)
        self.assertFalse(ok)  # the old rule: the learner's memory counts
        self.assertIn("1300 MiB more used on the whole device", error)
        del h.gpu.procs[h.learner]
        self.assertTrue(device_memory.check(base, h.probe(h.probe2, nvml=host_ns), h.slack)[0])

    def test_a_foreign_process_without_a_figure_falls_back(self):
        h = self.h
        base = self.baseline()
        h.gpu.procs[h.learner] = 1300 * MiB
        now = h.probe(h.probe2, nvml=FakeNvml(h.gpu, unknown={h.learner}))
        self.assertIsNone(now["own_used"])
        self.assertIn(f"no memory figure for pid {h.learner}", now["rule"])
        self.assertFalse(device_memory.check(base, now, h.slack)[0])

    def test_a_process_whose_ancestry_cannot_be_read_counts_as_ours(self):
        h = self.h
        base = self.baseline()
        hidden = random.randint(4_000_001, 5_000_000)  # not in the fake /proc: another pid namespace
        h.gpu.procs[hidden] = h.slack + random.randint(1, 512) * MiB
        now = h.probe(h.probe2)
        self.assertTrue(now["rule"].startswith("own processes"), now["rule"])
        self.assertFalse(device_memory.check(base, now, h.slack)[0])

    def test_nvml_errors_and_escapable_jobs_fall_back(self):
        h = self.h
        for kw, why in ((dict(nvml=FakeNvml(h.gpu, fail="rc 999")), "rc 999"),
                        (dict(why_not="a job ran without seccomp or a pid namespace"), "seccomp")):
            base = self.baseline(**kw)
            h.gpu.procs[h.learner] = 1300 * MiB
            now = h.probe(h.probe2, **kw)
            self.assertIsNone(now["own_used"])
            self.assertTrue(now["rule"].startswith("whole device:") and why in now["rule"], now["rule"])
            self.assertFalse(device_memory.check(base, now, h.slack)[0])
            del h.gpu.procs[h.learner]

    def test_no_nvml_falls_back(self):
        h = self.h
        h.gpu.procs[h.probe1] = h.ctx
        m = device_memory.measure(h.gpu.total, h.gpu.free(), None, h.probe1, h.zygote, h.proc.path,
                                  "NVML unavailable: no libnvidia-ml.so.1")
        self.assertEqual(m["rule"], "whole device: NVML unavailable: no libnvidia-ml.so.1")

    def test_the_rule_changing_between_probes_compares_the_whole_device(self):
        # A baseline by our processes, a later probe without NVML: both sides of
        # the comparison must be the same figure.
        h = self.h
        base = self.baseline()
        h.gpu.procs[h.learner] = 1300 * MiB
        now = h.probe(h.probe2, nvml=FakeNvml(h.gpu, fail="gone"))
        ok, error = device_memory.check(base, now, h.slack)
        self.assertFalse(ok)
        self.assertIn("1300 MiB more used on the whole device", error)
        # And the other way round: a baseline without NVML, a later probe with it.
        base = h.probe(h.probe1, nvml=FakeNvml(h.gpu, fail="not yet"))
        h.gpu.procs[h.learner] += h.slack + MiB
        ok, error = device_memory.check(base, h.probe(h.probe2), h.slack)
        self.assertFalse(ok)
        self.assertIn("the baseline's probe could not tell our processes apart", error)


if __name__ == "__main__":
    unittest.main(verbosity=2)
