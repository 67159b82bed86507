"""verify_cuda (the harness's CUDA helpers) against the torch code it replaces:
digests equal inputs.fingerprint's torch path bit for bit, comparisons count
exactly what torch.isclose(equal_nan=True) rejects (in float64), the input
exchange carries bytes from one fresh process to another, and outputs in
another process's memory are read where they lie: exported segments mapped
here, copied, compared and poisoned by one table launch.

    python3 verify_cuda_test.py LIB      (on a machine with a GPU)

Without a GPU or without the driver it prints SKIPPED and why, and exits 0
(CI; the torch paths it is checked against run there through the CPU
backend). On a machine with a GPU a library that does not load is a failure:
FAILED and exit status 1."""
import os
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

FAILS = []


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILS.append(what)


def writer(lib, sock_fd, nbytes, seed):
    """Child: maps the exchange from the fd it receives, writes seeded bytes."""
    import torch
    import verify_cuda
    torch.cuda.set_device(0)
    assert verify_cuda.load(lib) == "", verify_cuda.error()
    ex = verify_cuda.Exchange.import_fd(verify_cuda.recv_fd(verify_cuda.fd_socket(sock_fd)), nbytes)
    g = torch.Generator(device="cuda").manual_seed(seed)
    before = ex.tensor(0, 1024, torch.int32).clone()
    data = torch.randn(nbytes // 8, device="cuda", generator=g, dtype=torch.float64)
    ex.write(0, data)
    torch.cuda.synchronize()
    ok = bool((before == -1).all())  # the owner poisoned it (0xFF bytes)
    os.write(sock_fd, b"poisoned\n" if ok else b"not-poisoned\n")
    ex.release()


EXPORT_SIZES = (4 * (1 << 20) * 2 + 20, 68, 4000)  # bytes: several table chunks, a 16-byte tail, odd


def _exported(seed):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    big = torch.randint(0, 256, (EXPORT_SIZES[0],), device="cuda", generator=g, dtype=torch.uint8)
    small = torch.randint(0, 256, (EXPORT_SIZES[1],), device="cuda", generator=g, dtype=torch.uint8)
    odd = torch.randint(0, 256, (EXPORT_SIZES[2] + 4,), device="cuda", generator=g, dtype=torch.uint8)[4:]
    return [big, small, odd]  # odd: 4 bytes into its allocation (not 16-byte aligned)


def exporter(lib, sock_fd, seed):
    """Child: outputs in its own memory, exported as the executor does
    (wire.CandidateExchange.locate); then a late write, then it checks the
    reference's poison and exits."""
    import json
    import torch
    import verify_cuda
    torch.cuda.set_device(0)
    assert verify_cuda.load(lib) == "", verify_cuda.error()
    outs = _exported(seed)
    torch.cuda.synchronize()
    sock = socket.socket(fileno=sock_fd)
    f = sock.makefile("rw")
    descs = []
    for t in outs:
        handle, base, size = verify_cuda.ipc_export(t.data_ptr())
        descs.append({"handle": handle, "offset": t.data_ptr() - base, "size": size})
    f.write(json.dumps(descs) + "\n")
    f.flush()
    f.readline()  # "late": write after the snapshot
    outs[1][3] ^= 1
    torch.cuda.synchronize()
    f.write("written\n")
    f.flush()
    f.readline()  # "poisoned?"
    f.write(("yes" if all(bool((t == 0xFF).all()) for t in outs) else "no") + "\n")
    f.flush()
    f.readline()  # "exit"


def ipc_checks(lib, verify_cuda, torch):
    import json
    import wire
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    child = subprocess.Popen([sys.executable, __file__, "--exporter", lib, str(b.fileno()), "11"],
                             pass_fds=[b.fileno()])
    b.close()
    f = a.makefile("rw")
    descs = json.loads(f.readline())
    want = _exported(11)
    entries, snaps = [], []
    for d, w in zip(descs, want):
        ptr, size = verify_cuda.ipc_open(d["handle"])
        check(size == d["size"] and d["offset"] + w.numel() <= size, f"ipc: segment of {size} bytes mapped")
        snap = torch.full((w.numel(),), 0x5A, dtype=torch.uint8, device="cuda")
        snaps.append(snap)
        entries.append((ptr + d["offset"], snap.data_ptr(), w.numel()))
    table = wire._chunks(entries)
    step = wire.chunk_bytes(sum(w.numel() for w in want))
    chunks = sum(-(-w.numel() // step) for w in want)
    check(table.shape[0] == chunks and int(table[:, 2].max()) == step and int(table[:, 2].sum()) == sum(
        w.numel() for w in want), f"ipc: outputs split into {table.shape[0]} chunks of at most {step} bytes")
    key = 0x1234_5678_9ABC_DEF1
    digests = torch.zeros(5, dtype=torch.int64, device="cuda")
    verify_cuda.table_digest(table, key, digests[0:1])  # the seal: a read where they lie
    verify_cuda.table_digest(table, key, digests[1:2])
    verify_cuda.table_digest(table, key ^ 1, digests[2:3])
    check(all(bool((s == 0x5A).all()) for s in snaps), "ipc: the seal reads, it copies nothing")
    verify_cuda.table_digest(table, key, digests[3:4], copy=True)  # the snapshot under the same digest
    torch.cuda.synchronize()
    d = [int(v) for v in digests.tolist()]
    check(d[0] == d[1] and d[0] != 0, "ipc: the seal is deterministic")
    check(d[2] != d[0], "ipc: another key, another digest")
    check(d[3] == d[0], "ipc: the snapshot's digest equals the seal's")
    check(all(torch.equal(s, w) for s, w in zip(snaps, want)), "ipc: every output copied intact (one launch)")
    check(verify_cuda.table(verify_cuda.TABLE_DIFF, table) == 0, "ipc: unchanged outputs equal their snapshot")
    f.write("late\n")
    f.flush()
    check(f.readline().strip() == "written", "ipc: the exporter wrote one byte after the snapshot")
    check(verify_cuda.table(verify_cuda.TABLE_DIFF, table) > 0, "ipc: a late write in its memory is seen here")
    verify_cuda.table_digest(table, key, digests[4:5], copy=True)
    check(int(digests[4]) != d[0], "ipc: one byte written after the seal changes the snapshot's digest")
    verify_cuda.table(verify_cuda.TABLE_FILL, table)
    check(verify_cuda.table(verify_cuda.TABLE_NOT_FILLED, table) == 0, "ipc: poisoned where they lie")
    f.write("poisoned?\n")
    f.flush()
    check(f.readline().strip() == "yes", "ipc: the exporter sees our poison in its own memory")
    f.write("exit\n")
    f.flush()
    child.wait(timeout=60)
    try:
        verify_cuda.ipc_open("00" * 64)
        check(False, "ipc: a forged handle is refused")
    except verify_cuda.VerifyCudaError as e:
        check(True, f"ipc: a forged handle is refused ({e})")
    # After the exporter exited: what reading its segment does here (the
    # reference unmaps before the executor ends; this says whether it must).
    try:
        left = verify_cuda.table(verify_cuda.TABLE_NOT_FILLED, table)
        print(f"INFO ipc: after the exporter exited, its mapped segments still read here ({left} words differ)")
    except verify_cuda.VerifyCudaError as e:
        print(f"INFO ipc: after the exporter exited, reading its segments fails: {e}")
    torch.ones(1, device="cuda").add_(1)
    torch.cuda.synchronize()
    check(True, "ipc: this process's context is still usable")


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "--writer":
        writer(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
        return 0
    if len(sys.argv) >= 4 and sys.argv[1] == "--exporter":
        exporter(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return 0
    lib = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else ""
    import torch
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device here (verify_cuda needs a GPU; the torch paths run in CI)")
        return 0
    # The writer starts before this process touches CUDA (it must be fresh).
    nbytes = 24 << 20
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    child = subprocess.Popen([sys.executable, __file__, "--writer", lib, str(b.fileno()), str(nbytes), "7"],
                             pass_fds=[b.fileno()])
    b.close()
    import inputs
    import verify_cuda
    import wire
    torch.cuda.set_device(0)
    err = verify_cuda.load(lib)
    if err:
        print(f"FAILED: the library does not load on a machine with a GPU ({lib or 'no path given'}): {err}")
        child.kill()
        child.wait()
        return 1

    # 1. Digests: kernel == torch path, over dtypes, sizes across chunk
    #    boundaries and tile tails, and non-contiguous tensors.
    g = torch.Generator(device="cuda").manual_seed(1234)
    cases = [
        torch.randn(1000, device="cuda", generator=g),
        torch.randn((1 << 26) + 4097, device="cuda", generator=g) * 1e4,
        torch.randn(3 << 24, device="cuda", generator=g).to(torch.bfloat16),
        torch.randint(-2**62, 2**62, (70001,), device="cuda", generator=g),
        torch.randint(0, 256, ((1 << 26) + 3,), device="cuda", generator=g, dtype=torch.uint8),
        torch.rand(5000, device="cuda", generator=g) > 0.5,
        torch.randn(9999, device="cuda", generator=g, dtype=torch.float64),
        torch.randn(4097, device="cuda", generator=g, dtype=torch.complex64),
        torch.randint(-30000, 30000, (12345,), device="cuda", generator=g, dtype=torch.int16),
        torch.randn(512, 384, device="cuda", generator=g).t(),
        torch.empty(0, device="cuda"),
    ]
    for t in cases:
        fast = inputs.fingerprint([t])
        flat = t.contiguous().reshape(-1)
        unit = flat.element_size() if flat.element_size() in (1, 2, 4, 8) else 1
        slow = inputs._torch_digest(flat.view(inputs._INT_OF_SIZE[unit]), 1 << 26)
        slow = [slow[0] & (2**64 - 1), slow[1] & (2**64 - 1)]
        check(fast[0][:2] == slow, f"digest {t.dtype} {list(t.shape)} kernel == torch")
    x = torch.randn(1 << 20, device="cuda", generator=g)
    y = x.clone()
    y[777] = torch.nextafter(y[777], torch.tensor(1e9, device="cuda"))
    check(inputs.fingerprint([x]) != inputs.fingerprint([y]), "digest changes with one ulp at one element")
    z = x.clone()
    z[10], z[20] = x[20], x[10]
    check(inputs.fingerprint([x]) != inputs.fingerprint([z]), "digest changes when two elements swap")

    # 1b. The seal's keyed digest over a table: order-free, keyed, and moved
    #     by any change an additive digest would miss (two top bits flipped).
    src = torch.randn(3 << 20, device="cuda", generator=g)
    dst = torch.empty(src.numel() * 4 + 3, dtype=torch.uint8, device="cuda")
    u8 = src.view(torch.uint8)
    base_s, base_d = u8.data_ptr(), dst.data_ptr()
    entries = [(base_s, base_d, 5 << 20), (base_s + (5 << 20) + 1, base_d + (5 << 20) + 3, 1000),  # unaligned: bytes
               (base_s + (6 << 20), base_d + (6 << 20), (6 << 20))]
    tab = wire._chunks(entries)
    out = torch.zeros(6, dtype=torch.int64, device="cuda")
    verify_cuda.table_digest(tab, 99, out[0:1])
    verify_cuda.table_digest(tab.flip(0).cuda(), 99, out[1:2])  # chunks in another order (a device table)
    flipped = src.view(torch.int64)
    flipped[11] ^= (1 << 63)
    flipped[4000] ^= (1 << 63)
    verify_cuda.table_digest(tab, 99, out[2:3])
    flipped[11] ^= (1 << 63)
    flipped[4000] ^= (1 << 63)
    u8[(5 << 20) + 1 + 17] ^= 1  # one bit in the unaligned chunk
    verify_cuda.table_digest(tab, 99, out[3:4])
    u8[(5 << 20) + 1 + 17] ^= 1
    verify_cuda.table_digest(tab, 99, out[4:5], copy=True)
    torch.cuda.synchronize()
    d = [int(v) for v in out.tolist()]
    check(d[0] == d[1], "seal: the digest does not depend on the chunks' order")
    check(d[2] != d[0], "seal: two top bits flipped change the digest")
    check(d[3] != d[0], "seal: one bit in an unaligned chunk changes the digest")
    check(d[4] == d[0] and torch.equal(dst[:5 << 20], u8[:5 << 20])
          and torch.equal(dst[(5 << 20) + 3:(5 << 20) + 1003], u8[(5 << 20) + 1:(5 << 20) + 1001])
          and torch.equal(dst[6 << 20:12 << 20], u8[6 << 20:12 << 20]), "seal: copy and digest in one pass")

    # 2. Comparisons: counts and first indices == torch.isclose in float64.
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        ref = torch.randn(3 << 20, device="cuda", generator=g).to(dtype)
        got = (ref.double() + torch.randn(ref.shape, device="cuda", generator=g, dtype=torch.float64) * 3e-3).to(dtype)
        idx = torch.randint(0, ref.numel(), (500,), device="cuda", generator=g)
        got[idx[:100]] += 1.0
        got[idx[100:150]] = float("nan")
        ref[idx[150:170]] = float("nan")
        got[idx[160:170]] = float("nan")
        got[idx[170:180]] = float("inf")
        ref[idx[180:185]] = float("inf")
        got[idx[180:185]] = float("inf")
        bad_t = ~torch.isclose(got.double(), ref.double(), rtol=1e-2, atol=1e-2, equal_nan=True)
        nan_t = torch.isnan(got) & ~torch.isnan(ref)
        bad, nan, first_bad, first_nan = verify_cuda.count_mismatches(got, ref, 1e-2, 1e-2)
        want = (int(bad_t.sum()), int(nan_t.sum()), int(bad_t.nonzero()[0]), int(nan_t.nonzero()[0]))
        check((bad, nan, first_bad, first_nan) == want, f"compare {dtype}: {(bad, nan, first_bad, first_nan)} == {want}")
        bad, nan, _, _ = verify_cuda.count_mismatches(ref, ref, 1e-2, 1e-2)
        check(bad == 0 and nan == 0, f"compare {dtype}: identical tensors pass")
    for dtype in (torch.int64, torch.int32, torch.uint8, torch.bool, torch.complex128):
        ref = (torch.randn(100003, device="cuda", generator=g) * 100).to(dtype)
        got = ref.clone()
        check(verify_cuda.count_mismatches(got, ref, 0, 0)[0] == 0, f"compare {dtype}: equal passes")
        got[54321] = (ref[54321] + 1).to(dtype) if dtype != torch.bool else ~ref[54321]
        bad, _, first, _ = verify_cuda.count_mismatches(got, ref, 0, 0)
        check(bad >= 1 and first == 54321, f"compare {dtype}: one changed element found at {first}")

    # 2b. The batched check (krv_check): counts == count_mismatches, the
    # norm sums == precision.py's torch sums, one synchronisation for many.
    import precision
    import reference
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        lo = (torch.randn(1 << 20, device="cuda", generator=g) * 300).to(dtype)
        hi = lo.double() + torch.randn(lo.shape, device="cuda", generator=g, dtype=torch.float64) * 1e-3
        got = (hi + torch.randn(lo.shape, device="cuda", generator=g, dtype=torch.float64) * 2e-2).to(dtype)
        idx = torch.randint(0, lo.numel(), (300,), device="cuda", generator=g)
        got[idx[:50]] += 5.0
        got[idx[50:60]] = float("nan")
        lo[idx[60:70]] = float("inf")
        hi[idx[70:80]] = float("nan")
        batch = reference._CheckBatch(1e-2, 1e-2)
        i_plain = batch.add(got, lo, None, False)
        i_hi = batch.add(got, lo, hi, False)
        i_scaled = batch.add(got, lo, hi, True)
        i_same = batch.add(lo, lo, None, False)
        sums = batch.read()
        want = verify_cuda.count_mismatches(got, lo, 1e-2, 1e-2)
        check(sums[i_plain][:4] == want and sums[i_hi][:4] == want,
              f"check {dtype}: counts {sums[i_plain][:4]} == count_mismatches {want}")
        check(sums[i_same][0] == 0 and sums[i_same][1] == 0, f"check {dtype}: identical tensors pass")
        rms = reference._rms(lo)
        want_scaled = verify_cuda.count_mismatches(got, lo, 1e-2 * max(1.0, rms), 1e-2)
        check(sums[i_scaled][:4] == want_scaled and want_scaled[0] < want[0],
              f"check {dtype}: atol scaled by rms {rms:.4g}: {sums[i_scaled][:4]} == {want_scaled}")

        def close(a, b):
            return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-300)
        err2, ref2, own2 = sums[i_hi][4:]
        t = (precision._norm_diff(got, hi) ** 2, precision._norm(hi) ** 2, precision._norm_diff(lo, hi) ** 2)
        check(close(err2, t[0]) and close(ref2, t[1]) and close(own2, t[2]),
              f"check {dtype}: sums against fp64 {(err2, ref2, own2)} == torch {t}")
        err2, ref2, own2 = sums[i_plain][4:]
        t = (precision._norm_diff(got, lo) ** 2, precision._norm(lo) ** 2)
        check(close(err2, t[0]) and close(ref2, t[1]) and own2 == 0.0,
              f"check {dtype}: sums against lo {(err2, ref2, own2)} == torch {t}")
    # The batch flushes once it holds HOLD_HI_BYTES of fp64 outputs; indices stay in order.
    batch = reference._CheckBatch(1e-2, 1e-2)
    batch.HOLD_HI_BYTES = 1 << 20
    lo = torch.randn(1 << 17, device="cuda", generator=g)
    outs = [lo + k for k in range(5)]
    idx = [batch.add(o, lo, lo.double(), False) for o in outs]
    sums = batch.read()
    check(idx == list(range(5)) and [s[0] > 0 for s in sums] == [False, True, True, True, True],
          "check: a flushed batch keeps every output's place")

    # 3. Exchange: created here, poisoned, written by the fresh child, read here.
    ex = verify_cuda.Exchange.create(nbytes)
    ex.fill(0, ex.nbytes)
    verify_cuda.send_fd(a.fileno(), ex.fd)
    rc = child.wait(timeout=120)
    note = a.recv(64).decode().strip()
    want = torch.randn(nbytes // 8, device="cuda", generator=torch.Generator(device="cuda").manual_seed(7),
                       dtype=torch.float64)
    got = ex.tensor(0, nbytes // 8, torch.float64)
    check(rc == 0 and note == "poisoned", f"exchange: child rc={rc}, saw {note}")
    check(torch.equal(got, want), "exchange: the child's bytes arrive intact")
    ex.fill(0, nbytes)
    check(bool(torch.isnan(ex.tensor(0, nbytes // 4, torch.float32)).all()), "exchange: re-poisoned slot reads NaN")
    ex.release()

    # 4. Poison still in place (wire.not_filled, the after-check's one launch):
    #    unaligned spans over many pieces; a byte changed inside a span is
    #    seen, wherever it lies; one outside every span is not.
    area = torch.full(((24 << 20) + 13,), 0xFF, dtype=torch.uint8, device="cuda")
    spans = ((5, 9_000_001), (12_000_003, area.numel()))
    check(wire.not_filled(area, spans) == 0, "not_filled: all poison reads 0")
    seen = True
    for at in (5, 4_194_309, 9_000_000, 12_000_003, area.numel() - 1,
               int(torch.randint(12_000_003, area.numel(), (1,)))):
        area[at] = 0x7F
        seen &= wire.not_filled(area, spans) > 0
        area[at] = 0xFF
    check(seen, "not_filled: one byte changed anywhere inside a span is seen")
    area[9_000_001] = 0
    area[4] = 0
    check(wire.not_filled(area, spans) == 0 and wire.not_filled(area, ((0, 5),)) > 0,
          "not_filled: bytes outside the spans are not counted")
    del area

    # 5. The copy probe's rates (wire.copy_rates): positive, and never above
    #    what the device's memory can do (a copy reads and writes).
    import reference
    peak = reference.peak_copy_bytes_per_us("cuda")
    rate_in, rate_seal = wire.copy_rates(256 << 20, rounds=3)
    check(0 < rate_in <= 0.5 * peak * 1.02 and 0 < rate_seal <= peak * 1.02,
          f"copy_rates: input {rate_in:.0f}, seal {rate_seal:.0f} bytes/us (peak {peak:.0f})")

    # 6. Outputs read where they lie: another process's exported segments.
    ipc_checks(lib, verify_cuda, torch)

    # 7. The task's Model is built on the device (inputs.make_model): its
    #    parameters and buffers are drawn there, equal for equal seeds.
    model_checks(torch)
    print(f"verify_cuda_test: {len(FAILS)} failed")
    return 1 if FAILS else 0


def model_checks(torch):
    import types
    import inputs

    class Model(torch.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.gemm = torch.nn.Linear(n, n)
            self.register_buffer("mask", torch.tril(torch.ones(n, n)))

    task = types.SimpleNamespace(Model=Model, get_init_inputs=lambda: [1024])
    a, init = inputs.make_model(task, 7, "cuda")
    b, _ = inputs.make_model(task, 7, "cuda")
    c, _ = inputs.make_model(task, 8, "cuda")
    check(init == [1024] and all(t.is_cuda for t in list(a.parameters()) + list(a.buffers())),
          "make_model: parameters and buffers built on the device")
    check(all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values())),
          "make_model: the same seed draws the same weights")
    check(not torch.equal(a.gemm.weight, c.gemm.weight), "make_model: another seed draws other weights")


if __name__ == "__main__":
    sys.exit(main())
