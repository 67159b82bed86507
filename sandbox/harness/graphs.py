"""The executor's graph-replayed blocks: a block's forwards captured once as
one CUDA graph, before the reference's clock, on the block's own input rows
(poison then: the capture reads no values), and replayed inside the clock.
The replay has no per-forward host cost (Python, the op guard, launches), so
the trusted figure of a small kernel is its device time. The replay writes
its outputs into the same memory each time; where that is (the exported
segments) is told to the reference before the clock, so its copy is planned
there too.

Nothing here is trusted: the reference asks for graph blocks, compares every
replayed forward's outputs with its own, and pays graph figures only against
the baseline's graph figures. A forward that cannot be captured (work on the
legacy default stream, a host sync) falls back to eager blocks for the rest of
the run; a replay that computes something else fails its comparison.
"""
import json

import torch

import guards
import inputs as inputs_lib
import wire


CUDA_STREAM_PER_THREAD = 2  # cudaStreamPerThread: the executor's stream (candidate.py)


class Captured:
    def __init__(self, key, graph, outs, metas, segments):
        self.key, self.graph, self.outs, self.metas, self.segments = key, graph, outs, metas, segments


class GraphBlocks:
    def __init__(self):
        self.entry = None     # the one captured block kept for replay
        self.off_reason = ""  # set once capture failed: eager from then on

    @staticmethod
    def key(exchange, descs):
        return (exchange.generation, descs)  # compared by value (json.dumps of 511 forwards: ~6 ms a block)

    def get(self, exchange, descs, model, rows, guard):
        """The block's graph, captured now (outside the clock) unless the same
        rows were captured before. Returns (Captured or None, guard_active)."""
        if self.off_reason:
            return None, True
        k = self.key(exchange, descs)
        if self.entry is not None and self.entry.key == k:
            return self.entry, True
        self.entry = None  # frees the old graph's memory pool
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        guarded = guards.Guarded(guard)
        try:
            # Captured on the current stream (the per-thread one), where the
            # candidate's launches go (torch.cuda.graph's own side stream would
            # miss them), and not through torch.cuda.graph: its empty_cache
            # frees the eager blocks' cached segments, so the next eager block's
            # outputs land in new ones that the reference maps inside its clock.
            with torch.no_grad():
                g.capture_begin()
                try:
                    with guarded:
                        outs = [inputs_lib.flatten_outputs(model(*xs)) for xs in rows]
                finally:
                    g.capture_end()
        except guards.TorchOpForbidden:
            raise  # a verdict, as in an eager block
        except Exception as e:  # noqa: BLE001 - capture is optional: eager blocks remain
            self.off_reason = f"{type(e).__name__}: {str(e)[:200]}"
            del g
            _clear_launch_error()
            return None, guarded.active
        segments = wire.Segments()
        metas = [wire.export_outputs(flat, i, exchange, segments) for i, flat in enumerate(outs)]
        if any(isinstance(o, torch.Tensor) and not o.is_contiguous() for flat in outs for o in flat) \
                or any("slot" in m for ms in metas for m in ms):
            # The reference must read what each replay writes, where it writes it.
            self.off_reason = "outputs not readable where the replay writes them: " + (exchange.ipc_error or
                                                                                         "a non-contiguous output")
            return None, guarded.active
        self.entry = Captured(k, g, outs, metas, segments.handles)
        return self.entry, guarded.active


def _clear_launch_error():
    """A launch refused during capture leaves its error for the next launch
    check to find; consume it here so the eager blocks start clean."""
    for _ in range(3):
        try:
            torch.ones(1, device="cuda").add_(1)
            torch.cuda.synchronize()
            return
        except RuntimeError:
            continue
