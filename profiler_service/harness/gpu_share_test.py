#!/usr/bin/env python3
"""The device_shared decision (gpu_share.py) on CPU: a fake /proc tree and a
fake NVML stand in for the driver. Pids are drawn at random per test."""
import os
import random
import sys
import tempfile
import unittest

# The repository root: Bazel's runfiles tree, else two levels above this file.
ROOT = (os.path.join(os.environ["TEST_SRCDIR"], os.environ.get("TEST_WORKSPACE", "kernelrl"))
        if "TEST_SRCDIR" in os.environ else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, ROOT)

from profiler_service.harness import gpu_share  # noqa: E402


class FakeProc:
    """A /proc with `stat` files: {pid: (comm, ppid)}."""

    def __init__(self, tree):
        self.dir = tempfile.TemporaryDirectory()
        for pid, (comm, ppid) in tree.items():
            os.makedirs(os.path.join(self.dir.name, str(pid)))
            with open(os.path.join(self.dir.name, str(pid), "stat"), "w") as f:
                f.write(f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560 0 0\n")

    @property
    def path(self):
        return self.dir.name


class FakeNvml:
    """Answers each poll with the next (holders, samples) pair; samples are (pid, ts_us, sm, mem)."""

    def __init__(self, polls, fail=None):
        self.available = True
        self.polls, self.fail, self.since = list(polls), fail, []

    def running_pids(self):
        if self.fail:
            raise OSError(self.fail)
        return set(self.polls[0][0])

    def process_samples(self, since_us):
        self.since.append(since_us)
        holders, samples = self.polls.pop(0) if len(self.polls) > 1 else self.polls[0]
        return [s for s in samples if s[1] > since_us]


class Pids:
    """Distinct random pids: the worker, its zygote with this job's reference,
    supervisor and executor, a second zygote of the worker with a waiting job's
    reference and executor, others."""

    def __init__(self):
        p = random.sample(range(1000, 4_000_000), 13)
        self.zygote, self.ref, self.sup, self.exe, self.other, self.gone, self.host_a, self.host_b = p[:8]
        self.worker, self.zygote2, self.ref2, self.sup2, self.exe2 = p[8:]
        self.tree = {self.worker: ("sandbox_main", 1), self.zygote: ("python3", self.worker),
                     self.ref: ("python3", self.zygote),
                     self.sup: ("python3", self.zygote), self.exe: ("pt_main (x) y", self.sup),
                     self.zygote2: ("python3", self.worker), self.ref2: ("python3", self.zygote2),
                     self.sup2: ("python3", self.zygote2), self.exe2: ("python3", self.sup2),
                     self.other: ("python3", 1)}


def busy(pid, ts=None, sm=None):
    return (pid, ts if ts is not None else random.randint(10**15, 2 * 10**15),
            sm if sm is not None else random.randint(1, 100), random.randint(0, 100))


class DecideTest(unittest.TestCase):
    def setUp(self):
        self.p = Pids()

    def own(self):
        return {self.p.ref, self.p.exe}

    def test_quiet_device_is_not_shared(self):
        p = self.p
        n, pids, how = gpu_share.decide(p.ref, self.own(), [{p.ref, p.exe}] * 3,
                                        [(p.ref, 30, 10), (p.exe, 90, 40)])
        self.assertEqual((n, pids, how), (0, [], "pid"))

    def test_other_busy_process_is_named(self):
        p = self.p
        n, pids, how = gpu_share.decide(p.ref, self.own(), [{p.ref, p.exe, p.other}],
                                        [(p.ref, 30, 10), (p.exe, 50, 40), (p.other, 60, 20)])
        self.assertEqual((n, pids, how), (1, [p.other], "pid"))

    def test_idle_context_elsewhere_is_not_sharing(self):
        p = self.p
        n, _, _ = gpu_share.decide(p.ref, self.own(), [{p.ref, p.exe, p.other}],
                                   [(p.ref, 30, 10), (p.exe, 50, 40), (p.other, 0, 0)])
        self.assertEqual(n, 0)

    def test_exited_process_in_old_samples_does_not_count(self):
        p = self.p  # the previous job's executor: sampled, but holds no context during the stage
        n, _, _ = gpu_share.decide(p.ref, self.own(), [{p.ref, p.exe}],
                                   [(p.gone, 80, 30), (p.ref, 30, 10), (p.exe, 50, 40)])
        self.assertEqual(n, 0)

    def test_busy_other_holder_counts_when_our_samples_are_missing(self):
        p = self.p  # a busy second process beside a short stage: the driver sampled it, not us
        samples = [(p.other, random.randint(50, 100), random.randint(1, 40))]
        self.assertEqual(gpu_share.decide(p.ref, self.own(), [{p.ref, p.exe, p.other}] * 2, samples),
                         (1, [p.other], "pid"))
        # The same sample without the other process holding a context: an exited one, not shared.
        self.assertEqual(gpu_share.decide(p.ref, self.own(), [{p.ref, p.exe}] * 2, samples)[0], 0)

    def test_samples_in_the_host_namespace_count(self):
        p = self.p  # holders in our namespace, samples with host pids that match none of ours
        samples = [(p.host_a, 30, 10), (p.host_b, 50, 40)]
        self.assertEqual(gpu_share.decide(p.ref, self.own(), [{p.ref, p.exe}], samples), (0, [], "count"))
        samples.append((p.gone, 70, 10))
        self.assertEqual(gpu_share.decide(p.ref, self.own(), [{p.ref, p.exe, p.other}], samples),
                         (1, [], "count"))
        # The extra sample is an exited process (no foreign holder): not shared.
        self.assertEqual(gpu_share.decide(p.ref, self.own(), [{p.ref, p.exe}], samples)[0], 0)

    def test_both_lists_in_the_host_namespace_count(self):
        p = self.p
        host = random.sample(range(5_000_000, 6_000_000), 3)
        samples = [(h, 40, 5) for h in host]
        self.assertEqual(gpu_share.decide(p.ref, {p.ref}, [set(host)], samples)[0], 1)
        self.assertEqual(gpu_share.decide(p.ref, {p.ref}, [set(host[:2])], samples[:2])[0], 0)

    def test_executor_not_found_falls_back_to_counting(self):
        p = self.p  # /proc did not show the executor: counted as one of our two, never as foreign
        self.assertEqual(gpu_share.decide(p.ref, {p.ref}, [{p.ref, p.exe}], [(p.ref, 5, 1), (p.exe, 90, 9)])[0], 0)
        self.assertEqual(gpu_share.decide(p.ref, {p.ref}, [{p.ref, p.exe, p.other}],
                                          [(p.ref, 5, 1), (p.exe, 90, 9), (p.other, 70, 3)])[0], 1)

    def test_threshold(self):
        p = self.p
        samples = [(p.ref, 30, 10), (p.exe, 50, 40), (p.other, 3, 0)]
        self.assertEqual(gpu_share.decide(p.ref, self.own(), [{p.ref, p.exe, p.other}], samples, min_util=1)[0], 1)
        self.assertEqual(gpu_share.decide(p.ref, self.own(), [{p.ref, p.exe, p.other}], samples, min_util=5)[0], 0)


class MonitorTest(unittest.TestCase):
    def setUp(self):
        self.p = Pids()
        self.proc = FakeProc(self.p.tree)
        self.addCleanup(self.proc.dir.cleanup)

    def monitor(self, nvml, now):
        return gpu_share.Monitor(nvml, me=self.p.ref, worker=self.p.worker, proc=self.proc.path,
                                 clock=lambda: now, lookback_s=0.5)

    def test_own_processes_come_from_proc(self):
        p = self.p
        self.assertTrue(gpu_share.descends_from(p.exe, p.zygote, self.proc.path))
        self.assertFalse(gpu_share.descends_from(p.other, p.zygote, self.proc.path))
        self.assertFalse(gpu_share.descends_from(p.gone, p.zygote, self.proc.path))

    def test_ancestry_tells_another_process_from_an_unreadable_one(self):
        # foreign_memory subtracts only the processes proven not ours: a chain
        # that reaches pid 1 (however long), never a pid /proc does not show.
        p = self.p
        chain = random.sample(range(5_000_000, 6_000_000), 20)
        deep = FakeProc({**p.tree, **{pid: (f"sh{i}", parent) for i, (pid, parent)
                                      in enumerate(zip(chain, chain[1:] + [1]))}})
        self.addCleanup(deep.dir.cleanup)
        self.assertIs(gpu_share.ancestry(chain[0], p.zygote, deep.path), False)
        self.assertIs(gpu_share.ancestry(p.exe, p.zygote, deep.path), True)
        self.assertIsNone(gpu_share.ancestry(p.gone, p.zygote, deep.path))
        self.assertIsNone(gpu_share.ancestry(chain[0], p.zygote, deep.path, depth=5))
        used = {p.ref: random.randint(1, 1 << 30), p.exe: random.randint(1, 1 << 30),
                chain[0]: random.randint(1, 1 << 30), p.gone: random.randint(1, 1 << 30)}
        self.assertEqual(gpu_share.foreign_memory(p.ref, p.zygote, used, deep.path), (used[chain[0]], [chain[0]], ""))
        self.assertIsNone(gpu_share.foreign_memory(p.other, p.zygote, used, deep.path)[0])

    def test_the_worker_is_found_from_the_zygote(self):
        p = self.p
        self.assertEqual(gpu_share.parent_of(p.zygote, self.proc.path), p.worker)
        self.assertIsNone(gpu_share.parent_of(p.gone, self.proc.path))

    def test_another_job_of_the_worker_waiting_for_its_turn_is_not_foreign(self):
        # Its processes started CUDA and loaded the task (GPU work) just before our
        # clock, then went idle in our code (sandbox/gpu_turns.h): the driver's samples
        # from the lookback show them busy. A process outside the worker still counts.
        p = self.p
        now = random.uniform(1.7e9, 1.8e9)
        t = int(now * 1e6)
        holders = {p.ref, p.exe, p.ref2, p.exe2}
        nvml = FakeNvml([(holders, [busy(p.ref2, t - 200_000), busy(p.exe2, t - 100_000), busy(p.ref, t + 10)])])
        m = self.monitor(nvml, now)
        m.begin()
        r = m.result()
        self.assertEqual(r["foreign_gpu_processes"], 0, r)
        self.assertEqual(m.own, {p.ref, p.exe, p.ref2, p.exe2})
        nvml = FakeNvml([(holders | {p.other}, [busy(p.exe2, t - 100_000), busy(p.other, t + 10)])])
        m = self.monitor(nvml, now)
        m.begin()
        r = m.result()
        self.assertEqual(r["foreign_gpu_processes"], 1, r)
        self.assertIn(str(p.other), r["gpu_share_check"])

    def test_busy_second_process_declines(self):
        p = self.p
        now = random.uniform(1.7e9, 1.8e9)
        t = int(now * 1e6)
        holders = {p.ref, p.exe, p.other}
        nvml = FakeNvml([(holders, [busy(p.ref, t - 100), busy(p.other, t - 50)]),
                         (holders, [busy(p.exe, t + 10_000), busy(p.other, t + 20_000)])])
        m = self.monitor(nvml, now)
        m.begin()
        m.poll()
        r = m.result()
        self.assertEqual(r["foreign_gpu_processes"], 1, r)
        self.assertTrue(r["gpu_share_check"].startswith("pid:"), r)
        self.assertIn(str(p.other), r["gpu_share_check"])
        self.assertEqual(m.own, {p.ref, p.exe})
        # Each poll asks only for samples newer than the last one seen, from the lookback on.
        self.assertEqual(nvml.since[0], int((now - 0.5) * 1e6))
        self.assertGreaterEqual(nvml.since[-1], t + 10_000)

    def test_samples_before_not_before_are_the_paused_holders(self):
        # With the GPU lease: a process busy until the grant (its samples
        # stamped before the lag ran out) is not counted; one busy after is.
        p = self.p
        now = random.uniform(1.7e9, 1.8e9)
        t = int(now * 1e6)
        holders = {p.ref, p.exe, p.other}
        paused = FakeNvml([(holders, [busy(p.ref, t - 100), busy(p.other, t - 300_000)])])
        m = self.monitor(paused, now)
        m.begin(not_before=now - 0.2)
        self.assertEqual(paused.since[0], int((now - 0.2) * 1e6))
        self.assertEqual(m.result()["foreign_gpu_processes"], 0)
        ignoring = FakeNvml([(holders, [busy(p.ref, t - 100), busy(p.other, t - 50_000)])])
        m = self.monitor(ignoring, now)
        m.begin(not_before=now - 0.2)
        self.assertEqual(m.result()["foreign_gpu_processes"], 1)

    def test_quiet_device_passes(self):
        p = self.p
        now = random.uniform(1.7e9, 1.8e9)
        t = int(now * 1e6)
        nvml = FakeNvml([({p.ref, p.exe}, [busy(p.ref, t + 5), busy(p.exe, t + 9)])])
        m = self.monitor(nvml, now)
        m.begin()
        self.assertEqual(m.result()["foreign_gpu_processes"], 0)

    def test_no_nvml_is_unchecked_not_declined(self):
        m = self.monitor(None, 1.75e9)
        m.begin()
        r = m.result()
        self.assertEqual(r["foreign_gpu_processes"], 0)
        self.assertTrue(r["gpu_share_check"].startswith("unavailable"), r)
        m = self.monitor(FakeNvml([(set(), [])], fail="NVML_ERROR_NOT_SUPPORTED"), 1.75e9)
        m.begin()
        r = m.result()
        self.assertEqual(r["foreign_gpu_processes"], 0)
        self.assertIn("NVML_ERROR_NOT_SUPPORTED", r["gpu_share_check"])

    def test_pci_bus_id_is_nvmls_format(self):
        from profiler_service.harness import nvml

        class Props:
            pci_domain_id, pci_bus_id, pci_device_id = 0, random.randint(16, 255), random.randint(0, 31)
        self.assertEqual(nvml.cuda_pci_bus_id(Props), f"00000000:{Props.pci_bus_id:02x}:{Props.pci_device_id:02x}.0")
        self.assertEqual(nvml.cuda_pci_bus_id(object()), "")

    def test_driver_library_binding_loads_or_says_why(self):
        from profiler_service.harness import nvml
        procs = nvml.Processes()
        if not procs.available:  # no driver here: the check reports itself unavailable
            self.assertTrue(procs.error)
            r = gpu_share.Monitor(procs).result()
            self.assertEqual(r["foreign_gpu_processes"], 0)
            self.assertIn(procs.error, r["gpu_share_check"])
        else:
            self.assertIsInstance(procs.running_pids(), set)
            self.assertIsInstance(procs.process_samples(0), list)


if __name__ == "__main__":
    unittest.main(verbosity=2)
