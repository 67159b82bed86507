#!/usr/bin/env python3
"""The doorbell (protocol.Doorbell) only ends a wait: the message is on the
pipe before the bell rings, a wait ends when the bell rings or the pipe has
something (an error, EOF) or the spin runs out, and a ring that comes before
its message costs the reader nothing but a read that waits."""
import os
import random
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import protocol  # noqa: E402

Bell = protocol.Doorbell


class DoorbellTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, Bell.FILE)
        self.ours = Bell(self.path, create=True)
        self.r, self.w = os.pipe()

    def tearDown(self):
        os.close(self.r)
        os.close(self.w)
        self.dir.cleanup()

    def test_a_ring_from_another_process_ends_the_wait(self):
        seq = random.randrange(1, 1 << 40)
        ack_r, ack_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the other side: waits for GO, answers on the pipe, rings DONE
            theirs = Bell(self.path)
            ok = theirs.wait(Bell.GO, seq, 10.0, ack_r)
            protocol.send(self.w, {"type": "done", "rang": ok})
            theirs.ring(Bell.DONE, seq)
            os._exit(0)
        self.ours.ring(Bell.GO, seq)
        self.assertTrue(self.ours.wait(Bell.DONE, seq, 10.0, ack_r))
        self.assertEqual(protocol.LineReader(self.r).read(timeout=10), {"type": "done", "rang": True})
        os.waitpid(pid, 0)
        os.close(ack_r)
        os.close(ack_w)

    def test_the_pipe_ends_the_wait_without_a_ring(self):
        protocol.send(self.w, {"type": "error"})
        t = time.monotonic()
        self.assertFalse(self.ours.wait(Bell.DONE, 7, 10.0, self.r))
        self.assertLess(time.monotonic() - t, 5.0)  # far under the 10 s spin
        self.assertEqual(protocol.LineReader(self.r).read(timeout=1), {"type": "error"})

    def test_the_spin_runs_out(self):
        self.assertFalse(self.ours.wait(Bell.DONE, 7, 0.01, self.r))

    def test_a_wrong_count_does_not_ring(self):
        self.ours.ring(Bell.DONE, 6)
        self.assertFalse(self.ours.wait(Bell.DONE, 7, 0.01, self.r))
        self.ours.ring(Bell.DONE, 7)
        self.assertTrue(self.ours.wait(Bell.DONE, 7, 0.01, self.r))

    def test_the_two_counters_are_apart(self):
        self.ours.ring(Bell.GO, 3)
        self.assertFalse(self.ours.wait(Bell.DONE, 3, 0.01, self.r))


if __name__ == "__main__":
    unittest.main()
