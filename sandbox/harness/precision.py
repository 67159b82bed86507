"""Precision policies: what an output must match, in the reference process.

Every output is checked the same way, verify and timed forwards alike (step
2 on every verify set and on a secret sample of each profile block's
forwards: reference.NORM_CHECKS_PER_BLOCK):
  1. elementwise, against the task's fp32 reference `lo`:
     |got - lo| <= atol + rtol * |lo| (the task's TolerancePolicy; NaN where
     lo is not NaN never passes) -- KernelBench's rule;
  2. under "strict" and "tf32", also in norm against an fp64 reference `hi`
     (the task's Model in float64 on the same inputs):
         ||got - hi|| / ||hi||  <=  max(ratio * ||lo - hi|| / ||hi||,  floor_units * u)
     where u is the unit roundoff of the output's dtype. The bound is tied to
     the fp32 reference's own error: an honest fp32 kernel that sums in another
     order lands within a few times of it, while TF32 (10-bit mantissa), fp16
     or bf16 arithmetic or storage is ~2^-11 relative: thousands of u.

The policies (TolerancePolicy.precision, stated in every verdict):
  strict       the default: `lo` is computed with TF32 off everywhere (cuBLAS
               and cuDNN), and so are the baselines;
  tf32         `lo` and the baselines run with TF32 on; the norm bound then
               follows TF32's own error, so fp16/bf16 still fail where they are
               worse than it;
  kernelbench  step 1 only, TF32 off: comparable with published KernelBench
               tables (atol = rtol = 1e-2).
Where the fp64 reference cannot be built (an op without float64 support, or
outputs above `max_hi_bytes`) step 2 uses `lo` itself (its own error counted
as 0) and the result says so."""
import copy

import torch

POLICIES = ("strict", "tf32", "kernelbench")


def set_tf32(enabled):
    """TF32 for cuBLAS and cuDNN in this process (PyTorch's own defaults differ
    between the two, so both are set explicitly)."""
    torch.backends.cuda.matmul.allow_tf32 = bool(enabled)
    torch.backends.cudnn.allow_tf32 = bool(enabled)


def _unit_roundoff(dtype):
    return torch.finfo(dtype).eps / 2


def _to64(v):
    if isinstance(v, torch.Tensor) and v.is_floating_point():
        return v.double()
    return v


def _norm_diff(a, b, chunk=1 << 26):
    """||a - b||_2 in float64 over finite pairs, chunked (no output-sized temporary)."""
    fa, fb, total = a.reshape(-1), b.reshape(-1), 0.0
    for s in range(0, fa.numel(), chunk):
        x, y = fa[s:s + chunk].double(), fb[s:s + chunk].double()
        d = torch.where(torch.isfinite(x) & torch.isfinite(y), x - y, torch.zeros_like(x))
        total += float(torch.linalg.vector_norm(d)) ** 2
    return total ** 0.5


def _norm(a, chunk=1 << 26):
    fa, total = a.reshape(-1), 0.0
    for s in range(0, fa.numel(), chunk):
        x = fa[s:s + chunk].double()
        total += float(torch.linalg.vector_norm(torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0))) ** 2
    return total ** 0.5


class Policy:
    """One evaluation's precision policy over the task's Model."""

    def __init__(self, name, model, ratio, floor_units, max_hi_bytes):
        if name not in POLICIES:
            raise ValueError(f"unknown precision policy {name!r} (one of {', '.join(POLICIES)})")
        self.name, self.model = name, model
        self.ratio, self.floor_units, self.max_hi_bytes = float(ratio), float(floor_units), int(max_hi_bytes)
        self.model64 = None
        self.note = ""
        set_tf32(name == "tf32")
        if name != "kernelbench":
            try:
                self.model64 = copy.deepcopy(model).double()
            except Exception as e:  # noqa: BLE001 - a Model we cannot copy: lo stands in
                self.note = f"fp64 reference unavailable ({type(e).__name__}: {e})"[:200]

    def lo(self, xs):
        """The task's Model's outputs on xs."""
        import inputs as inputs_lib
        with torch.no_grad():
            return [o.detach() if isinstance(o, torch.Tensor) else o for o in inputs_lib.flatten_outputs(self.model(*xs))]

    def hi(self, xs, lo):
        """The fp64 copy's outputs on xs (lo: the Model's), or None where lo stands in."""
        import inputs as inputs_lib
        big = sum(o.numel() * 8 for o in lo if isinstance(o, torch.Tensor)) > self.max_hi_bytes
        if big and self.model64 is not None and not self.note:
            self.note = "fp64 reference skipped above max_hi_bytes; the fp32 reference stands in"
        if self.model64 is None or big:
            return None
        try:
            with torch.no_grad():
                return [o.detach() if isinstance(o, torch.Tensor) else o
                        for o in inputs_lib.flatten_outputs(self.model64(*[_to64(x) for x in xs]))]
        except Exception as e:  # noqa: BLE001 - no float64 kernel for an op: lo stands in
            self.model64 = None
            self.note = f"fp64 reference unavailable ({type(e).__name__}: {e})"[:200]
            return None

    def wants_norm(self, lo):
        """Whether step 2 applies to an output like `lo`."""
        return self.name != "kernelbench" and lo.is_floating_point() and lo.numel() > 0

    def norm_check(self, got, lo, hi):
        """None, or why `got` is less precise than the policy allows (step 2)."""
        if not self.wants_norm(lo):
            return None
        ref = hi if hi is not None else lo
        own2 = _norm_diff(lo, ref) ** 2 if hi is not None else 0.0
        return self.judge(_norm_diff(got, ref) ** 2, _norm(ref) ** 2, own2, hi is not None, lo.dtype)

    def judge(self, err2, ref2, own2, has_hi, dtype):
        """Step 2's rule on its sums: err2 = ||got - ref||^2, ref2 = ||ref||^2,
        own2 = ||lo - ref||^2 (0 without the fp64 reference), finite terms only
        (norm_check's torch sums, or verify_cuda's batched check)."""
        scale = max(ref2 ** 0.5, 1e-300)
        err = err2 ** 0.5 / scale
        own = own2 ** 0.5 / scale if has_hi else 0.0
        limit = max(self.ratio * own, self.floor_units * _unit_roundoff(dtype))
        if err <= limit:
            return None
        ref_name = "fp64" if has_hi else "fp32 (fp64 unavailable)"
        return (f"precision ({self.name}): relative error {err:.3g} against the {ref_name} reference, "
                f"limit {limit:.3g} ({self.ratio:g}x the fp32 reference's own {own:.3g}, "
                f"floor {self.floor_units:g} units of roundoff)")
