"""The block exchange on CPU (CI has no GPU): the layout of rows and slots,
inputs invisible until the reference writes them inside its clock, the
executor's views and output writes, where the reference reads each output,
its snapshot, the trusted after-checks (inputs written, outputs changed after
the snapshot), poison, and the precision policies (precision.py). The GPU
kind (device memory over an fd, outputs read from the executor's exported
segments) is verify_cuda_test.py's.

    python3 exchange_test.py"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import candidate  # noqa: E402
import precision  # noqa: E402
import reference  # noqa: E402
import wire  # noqa: E402

FAILS = []


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILS.append(what)


def exchange_checks(g):
    d = tempfile.mkdtemp()
    rows = [[torch.randn(4, 6, generator=g), 3], [torch.randn(4, 6, generator=g), 3]]
    outs = [[torch.randn(3, 5, generator=g), 7, torch.randint(0, 9, (100,), generator=g)] for _ in rows]

    lay = wire.Layout([96, 0], [60, 0, 800], 2)
    check((lay.in_off(0, 0), lay.in_off(1, 0), lay.in_area) == (0, 512, 1024), "input rows, 512-byte aligned")
    check((lay.out_off(0, 0), lay.out_off(0, 2), lay.out_off(1, 2)) == (1024, 1536, 3072), "output rows after them")

    ref = wire.RefExchange(d, "cpu")
    ref.ensure(wire.tensor_bytes(rows[0]), wire.tensor_bytes(outs[0]), 2)
    check(ref.kind == "file" and ref.layout.total == lay.total, f"file exchange of {ref.layout.total} bytes")
    check(bool((ref.u8 == 0xFF).all()), "the area starts poisoned")
    cand = wire.CandidateExchange(-1, d, "cpu")
    cand.accept(ref.offer())
    descs = [reference._descs(xs) for xs in rows]
    check(descs[0][1] == {"value": 3} and "value" not in descs[0][0], "tensors travel as layout, values as values")
    views = [cand.inputs(k, ds) for k, ds in enumerate(descs)]

    # Before the clock: the executor's views hold poison, not the inputs.
    staging = ref.stage([xs for xs in rows])
    check(bool(torch.isnan(views[0][0]).all()) and bool(torch.isnan(views[1][0]).all()),
          "staged inputs are not visible to the executor before they are written")
    ref.write_inputs(staging)  # inside the reference's clock
    check(torch.equal(views[0][0], rows[0][0]) and torch.equal(views[1][0], rows[1][0]) and views[0][1] == 3,
          "once written (after the clock starts) each row's views hold its own inputs")

    # The executor says where both rows' outputs are (on this exchange: their
    # slots, after its own copy); the reference's snapshot has them.
    segments = wire.Segments()
    metas = [wire.export_outputs(o, k, cand, segments) for k, o in enumerate(outs)]
    check([m.get("slot") for m in metas[0]] == [0, None, 2] and not segments.handles,
          f"outputs went to their slots: {metas[0]}")
    shot = ref.snapshot_for(2)
    ref.locate(shot, metas, segments.handles)
    ref.seal(shot)  # the clock's end: on a file exchange the snapshot itself
    check(not ref.take(shot), "nothing changed between the seal and the snapshot")
    for k in range(2):
        got = ref.output(shot, k, 0, 15, torch.float32)
        check(reference.compare(outs[k][0], metas[k][0], got, 1e-2, 1e-2) is None, f"row {k} output 0 matches")
        got2 = ref.output(shot, k, 2, 100, torch.int64)
        check(reference.compare(outs[k][2], metas[k][2], got2, 0, 0) is None, f"row {k} output 2 matches exactly")
    check(not ref.inputs_changed(staging) and not ref.outputs_changed(shot), "nothing changed after the block")

    # An output said to lie in a segment of the executor's memory cannot be
    # read from a file exchange; one said to be nowhere is not read at all.
    odd = ref.snapshot_for(2)
    ref.locate(odd, [[{**metas[0][0], "slot": None, "segment": 0, "offset": 0}, metas[0][1], {}], metas[1]],
               ["00" * 64])
    ref.seal(odd)
    check("not on the GPU" in odd.errors.get((0, 0), ""), f"a segment on a file exchange is refused: {odd.errors}")
    check(ref.output(odd, 0, 2, 100, torch.int64) is None and ref.output(odd, 1, 2, 100, torch.int64) is not None,
          "an output not located is not read")

    # The trusted after-checks: a write to the inputs, a write after "done".
    views[1][0].add_(1)
    check(ref.inputs_changed(staging), "an input write is seen by the reference")
    cand.put(0, 0, outs[0][0] * 2)
    check(ref.outputs_changed(shot), "an output written after the snapshot is seen (deferred work)")
    wrong = ref.output(shot, 0, 0, 15, torch.float32)
    check(reference.compare(outs[0][0], metas[0][0], wrong, 1e-2, 1e-2) is None,
          "the snapshot keeps what was there at 'done'")

    # Poison: nothing outlives its block; an unwritten slot fails as NaN.
    ref.poison(2, shot)
    check(bool((ref.u8 == 0xFF).all()), "both areas back to poison")
    again = ref.snapshot_for(2)
    ref.locate(again, metas, [])
    ref.seal(again)
    why = reference.compare(outs[0][0], metas[0][0], ref.output(again, 0, 0, 15, torch.float32), 1e-2, 1e-2)
    check(why is not None and "NaN" in why, f"an unwritten slot fails as NaN: {why}")
    bad = wire.export_outputs([torch.randn(4, 5), 7, outs[0][2]], 0, cand, wire.Segments())
    check("slot" not in bad[0] and "segment" not in bad[0], "an output of another size is not located")
    check("shape" in reference.compare(outs[0][0], bad[0], None, 1e-2, 1e-2), "and fails on its shape first")
    check(reference.compare(outs[0][0], metas[0][0], None, 1e-2, 1e-2).startswith("output not handed over"),
          "a tensor not handed over fails")

    # Many small tensors: staged in our memory, copied in at once; the same checks hold.
    many = [[torch.randn(4, 6, generator=g), 3] for _ in range(wire.STAGE_ABOVE_TENSORS + 2)]
    ref.ensure(wire.tensor_bytes(many[0]), wire.tensor_bytes(outs[0]), len(many))
    cand.accept(ref.offer())
    views = [cand.inputs(k, reference._descs(xs)) for k, xs in enumerate(many)]
    drawn = [xs[0].clone() for xs in many]
    staged = ref.stage(many)
    check(staged["bytes"] is not None and bool(torch.isnan(views[-1][0]).all()), "a large block is staged, unseen")
    base = staged["bytes"].data_ptr()
    check(all(base <= xs[0].data_ptr() < base + staged["bytes"].numel() and torch.equal(xs[0], d) and xs[1] == 3
              for xs, d in zip(many, drawn)), "staged rows are views of the staging: one copy of the inputs is ours")
    ref.write_inputs(staged)
    check(all(torch.equal(v[0], xs[0]) for v, xs in zip(views, many)), "one copy puts every row in place")
    check(not ref.inputs_changed(staged), "staged inputs unchanged")
    views[-1][0][0, 0] += 1
    check(ref.inputs_changed(staged), "a write to a staged input is seen")
    ref.poison(len(many))
    check(ref.poison_intact(len(many)), "poison intact after poisoning")
    cand.put(len(many) - 1, 0, outs[0][0])
    check(not ref.poison_intact(len(many)), "a write after poisoning is seen (checked once the executor is idle)")

    # The executor's views are made once per mapping: the same descriptor
    # gives the same view, unless the Model reshaped it in place.
    again = [cand.inputs(k, reference._descs(xs)) for k, xs in enumerate(many)]
    check(all(a[0] is v[0] for a, v in zip(again, views)), "the same descriptor gives the kept view")
    views[0][0].unsqueeze_(0)
    fresh = cand.inputs(0, reference._descs(many[0]))
    check(fresh[0] is not views[0][0] and list(fresh[0].shape) == [4, 6]
          and fresh[0].data_ptr() == views[0][0].data_ptr(), "a view reshaped in place is made again")
    other = [[torch.randn(6, 4, generator=g), 3]]
    check(list(cand.inputs(0, reference._descs(other[0]))[0].shape) == [6, 4], "another descriptor, another view")

    # Sizes that change re-allocate the area; the executor remaps it.
    gen = ref.generation
    ref.ensure([200, 0], [60, 0, 800], 1)
    cand.accept(ref.offer())
    check(ref.generation == gen + 1 and cand.layout.in_sizes == [200, 0], "re-allocation is remapped")
    check(cand.inputs(0, [{"shape": [50], "dtype": "torch.float32"}, {"value": 3}])[0].data_ptr() == cand.u8.data_ptr(),
          "views of the remapped area, not the old one's")
    ref.release()
    check(not os.path.exists(os.path.join(d, wire.EXCHANGE_FILE)), "the exchange file is removed at release")


def copy_rate_checks():
    """The rates our in-clock copies are taken off at (reference.copy_rates_for)."""
    real = reference.peak_copy_bytes_per_us
    try:
        reference.peak_copy_bytes_per_us = lambda device: 4800.0 if device == "cuda" else 0.0
        gpu = {"device": "cuda"}
        check(reference.copy_rates_for(gpu) == (2400.0, 4800.0), "no probe: the peak (a copy at half of it)")
        check(reference.copy_rates_for({**gpu, "input_copy_bytes_per_us": 2064.0, "seal_bytes_per_us": 3792.0})
              == (2064.0, 3792.0), "the probe's rates where it gave them")
        check(reference.copy_rates_for({**gpu, "input_copy_bytes_per_us": 9e9, "seal_bytes_per_us": 9e9})
              == (2400.0, 4800.0), "never faster than the peak")
        check(reference.copy_rates_for({"device": "cpu", "input_copy_bytes_per_us": 5.0}) == (0.0, 0.0),
              "nothing taken off on the CPU")
    finally:
        reference.peak_copy_bytes_per_us = real
    # The seal's share: its own GPU time in the block; a candidate's capped at the probe's rate.
    off = reference.seal_off_us
    check(off(4000.0, 4.0, 0.0, 8, False) == 1000.0, "no GPU time: the probe's rate")
    check(off(4000.0, 4.0, 6400.0, 8, False) == 800.0, "a candidate's outputs read faster: what it cost")
    check(off(4000.0, 4.0, 9600.0, 8, False) == 1000.0, "a candidate's slower seal: never more than the probe")
    check(off(4000.0, 4.0, 9600.0, 8, True) == 1200.0, "a baseline's: what it cost")
    check(off(4000.0, 0.0, 9600.0, 8, True) == 0.0, "nothing taken off without rates (the CPU)")


def ranges_checks(g):
    """The executor's output-aliases-input test: merged ranges against pairwise."""
    spans = []
    for _ in range(200):
        a = int(torch.randint(0, 10_000, (1,), generator=g))
        spans.append((a, a + int(torch.randint(1, 80, (1,), generator=g))))
    r = candidate.Ranges(spans)
    agree = True
    for _ in range(2000):
        lo = int(torch.randint(0, 10_100, (1,), generator=g))
        hi = lo + int(torch.randint(1, 40, (1,), generator=g))
        agree &= r.overlaps(lo, hi) == any(lo < b and a < hi for a, b in spans)
    check(agree, "merged ranges answer overlap queries as the pairwise test does")
    check(not candidate.Ranges([]).overlaps(0, 10) and candidate.Ranges([(5, 10)]).overlaps(9, 20)
          and not candidate.Ranges([(5, 10)]).overlaps(10, 20), "ranges are half-open")


class MatMul(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


class Exp(torch.nn.Module):
    def forward(self, x):
        return torch.exp(x)


def _round_mantissa(t, bits):
    """t rounded to `bits` explicit mantissa bits (TF32: 10, bf16: 7)."""
    i = t.contiguous().view(torch.int32)
    drop = 23 - bits
    i = (i + (1 << (drop - 1))) & ~((1 << drop) - 1)
    return i.view(torch.float32)


def precision_checks(g):
    a, b = torch.randn(128, 512, generator=g), torch.randn(512, 96, generator=g)
    for name in ("strict",):
        pol = precision.Policy(name, MatMul(), 16, 1024, 1 << 30)
        los = pol.lo([a, b])
        lo, hi = los[0], pol.hi([a, b], los)[0]
        check(hi.dtype == torch.float64, f"{name}: an fp64 reference")
        # Honest fp32 in another summation order: split the reduction in 8 and add the parts.
        other = sum(a[:, s:s + 64] @ b[s:s + 64] for s in range(0, 512, 64))
        check(pol.norm_check(other, lo, hi) is None, f"{name}: honest fp32 in another order passes")
        tf32 = _round_mantissa(a, 10) @ _round_mantissa(b, 10)
        why = pol.norm_check(tf32, lo, hi)
        check(why is not None and "precision" in why, f"{name}: TF32-rounded inputs fail ({why})")
        fp16 = (a.half().float() @ b.half().float()).half().float()
        check(pol.norm_check(fp16, lo, hi) is not None, f"{name}: fp16 inputs and storage fail")
        check(torch.allclose(fp16, lo, atol=1e-1, rtol=1e-2), f"{name}: ... which a 1e-2 tolerance lets through")
    # tf32: the fp32 reference (and the baselines) run with TF32 on, so the
    # bound follows TF32's own error (on a GPU; CPU matmuls have no TF32).
    precision.Policy("tf32", MatMul(), 16, 1024, 1 << 30)
    check(torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32, "tf32: TF32 on for cuBLAS and cuDNN")
    precision.Policy("strict", MatMul(), 16, 1024, 1 << 30)
    check(not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32,
          "strict: TF32 off for both (PyTorch's cuDNN default is on)")
    kb = precision.Policy("kernelbench", MatMul(), 16, 1024, 1 << 30)
    los = kb.lo([a, b])
    check(kb.hi([a, b], los) is None and kb.norm_check(_round_mantissa(los[0], 10), los[0], None) is None,
          "kernelbench: elementwise only (no fp64 reference, no norm bound)")
    # Elementwise: the fp32 reference is exactly rounded; fp16 storage fails, a 2-ulp exp passes.
    x = torch.randn(4096, generator=g)
    strict = precision.Policy("strict", Exp(), 16, 1024, 1 << 30)
    los = strict.lo([x])
    lo, hi = los[0], strict.hi([x], los)[0]
    ulp2 = lo * (1 + 2 * torch.finfo(torch.float32).eps * torch.sign(torch.randn(4096, generator=g)))
    check(strict.norm_check(ulp2, lo, hi) is None, "strict: exp within 2 ulp passes")
    check(strict.norm_check(lo.half().float(), lo, hi) is not None, "strict: exp stored through fp16 fails")
    check(strict.norm_check(lo.bfloat16().float(), lo, hi) is not None, "strict: exp stored through bf16 fails")
    # Without an fp64 reference (too big), the fp32 one stands in with a zero error of its own.
    small = precision.Policy("strict", Exp(), 16, 1024, 1024)
    los = small.lo([x])
    check(small.hi([x], los) is None and "skipped" in small.note, f"above max_hi_bytes: no fp64 reference ({small.note})")
    check(small.norm_check(lo.half().float(), los[0], None) is not None, "  and fp16 storage still fails")
    try:
        precision.Policy("fast", Exp(), 16, 1024, 1 << 30)
        check(False, "an unknown policy is refused")
    except ValueError as e:
        check("unknown precision policy" in str(e), f"an unknown policy is refused: {e}")


def main():
    g = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    exchange_checks(g)
    ranges_checks(g)
    copy_rate_checks()
    precision_checks(g)
    print(f"exchange_test: {len(FAILS)} failed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
