"""Where a profile's input sets go: the reference process makes every timed
forward's fresh inputs and expected outputs (reference.InputSets.make_block)
between blocks, with the GPU held, and in the twelfth and thirteenth sittings'
jobs that took 1.0-2.1 s of a ~3 s profile, the timed blocks ~0.2 s.

Per task (shapes of the family tasks the learning runs train on), the time a
set takes, with one sync per block as the profile has:
  block     InputSets.make_block(N), the whole thing, as shipped;
  seed      inputs._seed + profiling.timing_seed alone;
  get       make_inputs on the "task" distribution (seed, get_inputs());
  redraw    make_inputs on "normal" (get_inputs(), then the redraw);
  lo        the Model's forward on one set, repeated;
  generator a fresh seeded torch.Generator (make_inputs makes one a set);
  isnan     the NaN check of one output (non-"task" sets have one);
and each one's host-side (enqueue) time, without the final sync, to tell the
Python and launch overhead from the device's work.

    python3 tests/bench/input_sets_bench.py [SETS_PER_BLOCK] [BLOCKS]
"""
import os
import statistics
import sys
import time
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "sandbox", "harness"))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
import inputs as inputs_lib  # noqa: E402
import precision  # noqa: E402
import profiling  # noqa: E402
import reference  # noqa: E402

TASKS = {
    "elementwise gelu-sigmoid 4096x4096": ("""
import torch
import torch.nn as nn
import torch.nn.functional as F
class Model(nn.Module):
    def forward(self, x):
        return torch.sigmoid(F.gelu(x, approximate="tanh"))
def get_inputs():
    return [torch.randn(4096, 4096)]
def get_init_inputs():
    return []
"""),
    "softmax 512x8192": ("""
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)
def get_inputs():
    return [torch.randn(512, 8192)]
def get_init_inputs():
    return []
"""),
    "relu gemm 512x1024x1024": ("""
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(1024, 1024)
    def forward(self, x):
        return torch.relu(self.fc(x))
def get_inputs():
    return [torch.randn(512, 1024)]
def get_init_inputs():
    return []
"""),
}


def module_of(name, src):
    mod = types.ModuleType(name.replace(" ", "_"))
    exec(compile(src, name, "exec"), mod.__dict__)  # noqa: S102 - our own task text
    return mod


def per_set_us(fn, count, blocks, device):
    """(median per-set us with a sync per block, median host-only us)."""
    walls, hosts = [], []
    for _ in range(blocks):
        torch.cuda.synchronize() if device == "cuda" else None
        t0 = time.perf_counter()
        keep = fn(count)
        t1 = time.perf_counter()
        torch.cuda.synchronize() if device == "cuda" else None
        t2 = time.perf_counter()
        del keep
        walls.append((t2 - t0) * 1e6 / count)
        hosts.append((t1 - t0) * 1e6 / count)
    return statistics.median(walls), statistics.median(hosts)


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    blocks = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.set_num_threads(1)  # as the harness processes run
    print(f"device {device} ({torch.cuda.get_device_name(0) if device == 'cuda' else 'no GPU'}), "
          f"{count} sets a block, {blocks} blocks; per set: median us with a sync per block (host-only us)")
    for name, src in TASKS.items():
        mod = module_of(name, src)
        model, _ = inputs_lib.make_model(mod, 1234, device)
        policy = precision.Policy("strict", model, 4.0, 64.0, 1 << 30)
        sets = reference.InputSets(mod, policy, list(inputs_lib.DEFAULT_CYCLE), device, 987654321)
        x = inputs_lib.make_inputs(mod, 5, "task", device)
        y = policy.lo(x)[0]
        sets.make_block(count)  # the allocator's segments, as the profile's warm-up blocks leave them
        rows = {
            "block": lambda n: sets.make_block(n),
            "seed": lambda n: [inputs_lib._seed(profiling.timing_seed(7, k), device) for k in range(n)],
            "get": lambda n: [inputs_lib.make_inputs(mod, k, "task", device) for k in range(n)],
            "redraw": lambda n: [inputs_lib.make_inputs(mod, k, "normal", device) for k in range(n)],
            "lo": lambda n: [policy.lo(x) for _ in range(n)],
            "generator": lambda n: [torch.Generator(device=device).manual_seed(k) for k in range(n)],
            "isnan": lambda n: [torch.isnan(y).any() for _ in range(n)],
        }
        cells = []
        for key, fn in rows.items():
            wall, host = per_set_us(fn, count, blocks, device)
            cells.append(f"{key} {wall:.0f} ({host:.0f})")
        print(f"{name}: " + ", ".join(cells))
        del sets, model, policy, x, y
        if device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
