#!/usr/bin/env python3
"""The first block size and the graph decision read a forward's time from
the verify blocks' go-to-done phase, not from the whole verify block (its
input copy, locate and snapshot are not the forward's)."""
import os
import random
import sys
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import profiling  # noqa: E402


class VerifyEstimateTest(unittest.TestCase):
    def test_go_to_done_not_the_whole_block(self):
        r = random.Random()
        forward_us = [r.uniform(900, 1100) for _ in range(5)]
        block_ms = [f / 1e3 + r.uniform(2.5, 3.5) for f in forward_us]  # Copies, locate, snapshot.
        est = profiling.verify_estimate_us({"forward_us": forward_us, "forward_ms": block_ms})
        self.assertEqual(est, min(forward_us))
        self.assertLess(est, 2000)  # A ~1 ms forward is below graph_below_us (2 ms).

    def test_older_results_and_none(self):
        self.assertEqual(profiling.verify_estimate_us({"forward_ms": [4.0, 3.5]}), 3500)
        self.assertEqual(profiling.verify_estimate_us({"forward_ms": [], "forward_us": []}), 1e3)


class LeaseSettledTest(unittest.TestCase):
    """With the GPU lease the profile waits until the driver's samples no
    longer report the holders that paused for it, and says from when."""

    def run_settled(self, quiet, lag, now):
        slept = []
        job = {"gpu_lease_quiet_since_unix_s": quiet, "profiler": {"gpu_lease_sample_lag_s": lag}}
        return profiling.lease_settled(job, clock=lambda: now, sleep=slept.append), slept

    def test_no_lease_no_wait(self):
        got, slept = self.run_settled(0.0, 2.0, random.uniform(1.7e9, 1.8e9))
        self.assertEqual((got, slept), (0.0, []))

    def test_waits_out_the_lag_after_the_last_shared_step(self):
        quiet, lag = random.uniform(1.7e9, 1.8e9), random.uniform(1.0, 3.0)
        spent = random.uniform(0.1, 0.9) * lag  # the verify sets ran meanwhile
        got, slept = self.run_settled(quiet, lag, quiet + spent)
        self.assertEqual(got, quiet + lag)
        self.assertEqual(len(slept), 1)
        self.assertAlmostEqual(slept[0], lag - spent, places=3)

    def test_no_wait_once_the_lag_has_passed(self):
        # A learner idle since well before the grant: the samples hold none of its work.
        quiet, lag = random.uniform(1.7e9, 1.8e9), random.uniform(1.0, 3.0)
        got, slept = self.run_settled(quiet, lag, quiet + lag + random.uniform(0.01, 5.0))
        self.assertEqual((got, slept), (quiet + lag, []))


class FakeExecutor:
    """Blocks as the executor runs them: one captured graph per block size
    (graphs.py), whose first replay is slower (it uploads the graph)."""

    def __init__(self, sizes, graph, eager_us, graph_us):
        self.sizes, self.graph = sizes, graph
        self.eager_us, self.graph_us = eager_us, graph_us
        self.captured, self.replayed = None, False
        self.blocks = []  # (timed, as_graph, forwards, first replay of its graph)

    def one_block(self, timed, as_graph=False):
        n = self.graph["forwards"] if as_graph else self.sizes["eager"]
        first = False
        if as_graph:
            if self.captured != n:
                self.captured, self.replayed = n, False
            first, self.replayed = not self.replayed, True
        self.blocks.append((timed, as_graph, n, first))
        per = self.graph_us * (1.06 if first else 1.0) if as_graph else self.eager_us + 4.0 / n
        return True, per


class WarmUpTest(unittest.TestCase):
    """No timed block replays a graph for the first time, and every timed
    block runs at a size an untimed one ran at before."""

    def cfg(self, r, warmup_blocks):
        return types.SimpleNamespace(block_target_us=r.uniform(5e3, 2e4), warmup_blocks=warmup_blocks)

    def run_warm_up(self, r, graph_on, warmup_blocks):
        cfg = self.cfg(r, warmup_blocks)
        capacity = r.randint(2000, 5000)
        sizes = {"eager": r.randint(1, 40)}
        graph = {"on": graph_on, "capacity": r.randint(600, 1024), "forwards": sizes["eager"]}
        ex = FakeExecutor(sizes, graph, eager_us=r.uniform(30, 80), graph_us=r.uniform(8, 25))
        self.assertTrue(profiling.warm_up(cfg, sizes, graph, ex.one_block, capacity))
        untimed = list(ex.blocks)
        for _ in range(3):  # the timed loop's rounds
            ex.one_block(True)
            if graph["on"]:
                ex.one_block(True, as_graph=True)
        return ex, untimed

    def test_small_kernel_graph_blocks(self):
        r = random.Random()
        for warmup_blocks in (1, 2):
            ex, untimed = self.run_warm_up(r, True, warmup_blocks)
            timed = [b for b in ex.blocks if b[0]]
            self.assertEqual([b for b in timed if b[3]], [], f"a timed block replayed its graph first: {ex.blocks}")
            for _, as_graph, n, _ in timed:
                self.assertIn((False, as_graph, n), [b[:3] for b in untimed], ex.blocks)
            self.assertEqual(sum(1 for b in timed if b[1]), 3)

    def test_without_graphs_no_graph_block(self):
        r = random.Random()
        ex, untimed = self.run_warm_up(r, False, 1)
        self.assertFalse(any(b[1] for b in ex.blocks))
        self.assertEqual(len(untimed), 2)  # the first block sized the rest; one more at that size

    def test_a_failed_block_ends_the_warm_up(self):
        r = random.Random()
        cfg = self.cfg(r, 2)
        calls = []

        def failing(timed, as_graph=False):
            calls.append((timed, as_graph))
            return False, None

        graph = {"on": True, "capacity": 1024, "forwards": 8}
        self.assertFalse(profiling.warm_up(cfg, {"eager": 8}, graph, failing, 4096))
        self.assertEqual(calls, [(False, False)])


class RecorderWarmWindowTest(unittest.TestCase):
    """The executor's recorder warm-up runs harness kernels (torch.ones, add_)
    in a window before any call: an untimed one, so a candidate whose only
    kernels are an allowed library's does not read as running torch ops."""

    def test_warm_window_is_untimed(self):
        from unittest import mock
        from profiler_service.harness import kprof as kprof_mod
        tags, launched = [], []

        class FakeKprof:
            def begin(self, tag):
                tags.append(tag)

            def end(self):
                pass

        fake_cuda = types.SimpleNamespace(Event=lambda enable_timing: object(),
                                          synchronize=lambda: launched.append("sync"))
        fake_torch = types.SimpleNamespace(
            cuda=fake_cuda,
            ones=lambda *a, **k: types.SimpleNamespace(add_=lambda v: launched.append("add_")))
        with mock.patch.object(profiling, "torch", fake_torch), \
                mock.patch.object(profiling, "recorder_path", lambda job: "/fake/libkprof.so"), \
                mock.patch.object(kprof_mod, "load", lambda: FakeKprof()), \
                mock.patch("ctypes.CDLL", lambda name: object()):
            timer = profiling.CallTimer({"device": "cuda"})
        self.assertEqual(timer.note, "recorder warm")
        self.assertEqual(launched, ["add_", "sync"])
        self.assertTrue(tags)
        self.assertTrue(all(t < kprof_mod.TAG_TIMED for t in tags), tags)


if __name__ == "__main__":
    unittest.main()
