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


if __name__ == "__main__":
    unittest.main()
