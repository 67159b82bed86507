#!/usr/bin/env python3
"""The first block size and the graph decision read a forward's time from
the verify blocks' go-to-done phase, not from the whole verify block (its
input copy, locate and snapshot are not the forward's)."""
import os
import random
import sys
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


if __name__ == "__main__":
    unittest.main()
