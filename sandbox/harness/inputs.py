"""Input sets for verification: the task's get_inputs() run under a secret
per-set seed on the target device, then (for floating tensors) redrawn from a
named distribution so that hacks tuned to one distribution fail (e.g. ReLU
returning its input passes only on non-negative data; fp16 downcasts overflow
on large magnitudes). Both the reference and the candidate process build the
same sets from the same seed; fingerprints prove they did."""
import torch

import verify_cuda

DISTRIBUTIONS = ("task", "normal", "uniform_pm1", "uniform01", "large_magnitude", "small_magnitude")
DEFAULT_CYCLE = ["task", "normal", "task", "uniform_pm1", "large_magnitude"]


def _redraw(t, dist, gen):
    if not t.is_floating_point() or dist == "task":
        return t
    kw = dict(dtype=t.dtype, device=t.device, generator=gen)
    if dist == "normal":
        return torch.randn(t.shape, **kw)
    if dist == "uniform_pm1":
        return torch.rand(t.shape, **kw) * 2 - 1
    if dist == "uniform01":
        return torch.rand(t.shape, **kw)
    if dist == "large_magnitude":
        # |x| mostly above fp16's 65504: a silent half-precision path overflows.
        return torch.randn(t.shape, **kw) * 1e5
    if dist == "small_magnitude":
        return torch.randn(t.shape, **kw) * 1e-3
    raise ValueError(f"unknown distribution {dist!r}")


def _seed(seed, device):
    """torch.manual_seed for the generators get_inputs() can draw from here
    (the CPU's and the current GPU's): manual_seed also walks every other
    backend, 63-86 us a call, once for every forward of a profile block."""
    torch.default_generator.manual_seed(seed)
    if str(device).startswith("cuda"):
        torch.cuda.default_generators[torch.cuda.current_device()].manual_seed(seed)


def make_inputs(module, seed, dist, device):
    """Returns the list get_inputs() builds, on `device`, deterministic in seed."""
    _seed(seed, device)
    with torch.device(device):
        raw = module.get_inputs()
    gen = torch.Generator(device=device)
    gen.manual_seed(seed ^ 0x5DEECE66D)
    out = []
    for x in raw:
        if isinstance(x, torch.Tensor):
            x = _redraw(x.to(device), dist, gen)
        out.append(x)
    return out


def make_model(module, init_seed, device):
    """The task's Model, deterministic in init_seed, its parameters drawn on
    `device` as make_inputs draws the inputs (on the CPU, with the one thread
    a harness process keeps, a GEMM task's 8192x8192 weights took ~0.7 s a
    process on the H200). Every process that builds it does so on the same
    device, so the reference's and the candidate's weights are equal."""
    torch.manual_seed(init_seed)
    init = module.get_init_inputs()
    with torch.device(device):
        model = module.Model(*init)
    return model.to(device).eval(), init


_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


_WEIGHTS = {}  # (device, chunk) -> int64 [chunk] position weights, made once


def _weights(device, n, chunk):
    """Weights for the first n positions of a chunk; only full chunks (multi-
    GB tensors, 512 MB of weights) are cached, small tensors pay for theirs."""
    if n < chunk:
        return torch.arange(n, device=device, dtype=torch.int64) % 65521 + 1
    key = (str(device), chunk)
    if key not in _WEIGHTS:
        _WEIGHTS[key] = torch.arange(chunk, device=device, dtype=torch.int64) % 65521 + 1
    return _WEIGHTS[key]


def fingerprint(values, chunk=1 << 26):
    """Exact, order-independent digest of each tensor's bytes: integer sums of
    the bit patterns, plain and position-weighted (mod 2^64). Equal across
    processes iff the inputs are (up to astronomically unlikely collisions),
    whatever the thread count or reduction order. Position weights are
    (i mod 65521) + 1 within a chunk of 2^26 units times (chunk index + 1);
    the bit patterns are summed as they are (sign-extended; bytes unsigned).
    On CUDA with the harness's helper library one kernel pass computes it
    (verify_cuda.digest_units, same definition, tested against this code);
    otherwise torch ops, three passes per chunk."""
    fp = []
    for x in values:
        if not isinstance(x, torch.Tensor):
            fp.append(repr(x))
            continue
        flat = x.detach().contiguous().reshape(-1)
        size = flat.element_size()
        unit = size if size in _INT_OF_SIZE else 1
        if flat.is_cuda and verify_cuda.available() and chunk == 1 << 26:
            plain, weighted = verify_cuda.digest_units(flat, unit) if flat.numel() else (0, 0)
        else:
            plain, weighted = _torch_digest(flat.view(_INT_OF_SIZE[unit]), chunk)
        fp.append([plain & (2**64 - 1), weighted & (2**64 - 1), list(x.shape), str(x.dtype)])
    return fp


def _torch_digest(bits, chunk):
    w = _weights(bits.device, min(chunk, bits.numel()), chunk)
    plain = weighted = 0
    for k, start in enumerate(range(0, bits.numel(), chunk)):
        c = bits[start:start + chunk]
        plain += int(c.sum(dtype=torch.int64))
        weighted += (k + 1) * int((c * w[:c.numel()]).sum(dtype=torch.int64))
    return plain, weighted


def flatten_outputs(out):
    if isinstance(out, (list, tuple)):
        flat = []
        for o in out:
            flat.extend(flatten_outputs(o))
        return flat
    return [out]
