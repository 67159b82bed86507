"""The call exchange's bookkeeping on CPU (CI has no GPU): input and output
slot layout, regions, inputs written by the reference and viewed by the
candidate, the candidate's output writes, the reference's reads, poison after
every call, input writes seen by the reference, and the fall-back to files. The device memory is faked with a host buffer; the
real allocation, fd passing and kernels are verify_cuda_test.py's (GPU).

    python3 exchange_test.py"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import reference  # noqa: E402
import wire  # noqa: E402
import verify_cuda  # noqa: E402

FAILS = []


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILS.append(what)


class FakeExchange(verify_cuda.Exchange):
    """Exchange over a host byte buffer; shared by both sides like the mapping."""
    made = []

    def __init__(self, nbytes):
        super().__init__(ptr=0, nbytes=nbytes, fd=99)
        self.buf = torch.zeros(nbytes, dtype=torch.uint8)

    @classmethod
    def create(cls, nbytes):
        ex = cls(nbytes)
        ex.fill(0, ex.nbytes)
        cls.made.append(ex)
        return ex

    def fill(self, offset, nbytes, value=0xFF):
        self.buf[offset:offset + nbytes] = value

    def write(self, offset, t):
        if offset + t.nbytes > self.nbytes:
            raise verify_cuda.VerifyCudaError("output does not fit its exchange slot")
        self.buf[offset:offset + t.nbytes] = t.reshape(-1).view(torch.uint8)

    def tensor(self, offset, numel, dtype):
        size = torch.empty((), dtype=dtype).element_size()
        return self.buf[offset:offset + numel * size].view(dtype)

    def release(self):
        pass


def main():
    verify_cuda.available = lambda: True
    verify_cuda.Exchange.create = FakeExchange.create
    verify_cuda.send_fd = lambda sock, fd: None
    verify_cuda.fd_socket = lambda fd: object()
    verify_cuda.recv_fd = lambda sock: 99
    verify_cuda.Exchange.import_fd = classmethod(lambda cls, fd, nbytes: FakeExchange.made[-1])

    d = tempfile.mkdtemp()
    g = torch.Generator().manual_seed(5)
    xs = [torch.randn(4, 6, generator=g), 3]
    refs = [torch.randn(3, 5, generator=g), 7, torch.randint(0, 9, (100,), generator=g)]
    ref = wire.RefSlots(d, "cuda", xsock=5)
    ref.slot_device = "cpu"
    cand = wire.CandidateSlots(5, device="cpu")

    # Layout: inputs then outputs, one slot per tensor, 512-byte aligned, two regions.
    ref.plan(xs, refs)
    check(ref.note == "gpu" and len(ref.regions) == 2, f"slots planned ({ref.note})")
    r0, r1 = ref.region_for(xs, refs, 0), ref.region_for(xs, refs, 1)
    check(r0 == {"in": [[0, 96], None], "out": [[512, 60], None, [1024, 800]]}, f"region 0 {r0}")
    check(r1["in"] == [[2048, 96], None] and r1["out"][0] == [2560, 60], f"region 1 {r1}")
    check(FakeExchange.made[-1].nbytes == 4096, "one allocation for both regions")
    check(bool((FakeExchange.made[-1].buf == 0xFF).all()), "allocation starts poisoned")

    # The reference writes call 0's inputs; the candidate views exactly them.
    descs = ref.write_inputs(xs, r0, 0)
    offer = ref.offer(r0)
    check(descs[0].get("slot") == 0 and descs[1] == {"value": 3} and not os.listdir(d), f"inputs in slots {descs}")
    check(cand.accept(offer) == "" and cand.status() == "gpu", "candidate maps the exchange")
    seen = wire.materialise_inputs(descs, cand, d, "cpu")
    check(torch.equal(seen[0], xs[0]) and seen[1] == 3, "candidate sees the inputs the reference wrote")

    # Candidate writes its outputs; the reference compares from the slots.
    metas = wire.export_outputs(refs, d, "0", cand)
    check([m.get("slot") for m in metas] == [0, None, 2] and not os.listdir(d), f"outputs went to slots: {metas}")
    why = [reference.compare(r, m, ref, j, r0, 1e-2, 1e-2) for j, (r, m) in enumerate(zip(refs, metas))
           if isinstance(r, torch.Tensor)]
    check(why == [None, None], f"correct outputs pass from slots: {why}")

    # A write to the inputs is visible to the reference (trusted mutation check).
    seen[0].add_(1)
    check(not torch.equal(ref.read_input(descs[0], r0), xs[0].reshape(-1)), "input writes are seen by the reference")

    # After the call every slot is poisoned: stale bytes never pass again.
    ref.poison(r0)
    check(bool(torch.isnan(FakeExchange.made[-1].tensor(512, 15, torch.float32)).all()), "output slot re-poisoned")
    check(bool(torch.isnan(FakeExchange.made[-1].tensor(0, 24, torch.float32)).all()), "input slot re-poisoned")
    why = reference.compare(refs[0], metas[0], ref, 0, r0, 1e-2, 1e-2)
    check(why is not None and "NaN" in why, f"an unwritten (poisoned) slot fails as NaN: {why}")

    # A wrong output fails from region 1; a slot claim the reference did not make fails.
    cand.accept(ref.offer(r1))
    metas1 = wire.export_outputs([refs[0] + 1, 7, refs[2]], d, "1", cand)
    why = reference.compare(refs[0], metas1[0], ref, 0, r1, 1e-2, 1e-2)
    check(why is not None and "max abs err" in why, f"a wrong output fails from region 1: {why}")
    check(reference.compare(refs[2], {**metas1[2], "slot": 0}, ref, 2, r1, 1e-2, 1e-2)
          == "output slot missing or of the wrong size", "a slot index other than the output's fails")

    # A call whose sizes differ gets no slots: files, both ways.
    big = [torch.randn(5, 6, generator=g), 3]
    check(ref.region_for(big, refs, 2) is None, "a call whose inputs differ in size gets no slots")
    descs2 = ref.write_inputs(big, None, 2)
    cand.accept(None)
    seen2 = wire.materialise_inputs(descs2, cand, d, "cpu")
    check("file" in descs2[0] and torch.equal(seen2[0], big[0]), "inputs through a file")
    metas2 = wire.export_outputs([torch.randn(4, 5), 7, refs[2]], d, "2", cand)
    check("file" in metas2[0] and "slot" not in metas2[0], "and the candidate then writes files")
    seen2[0].mul_(2)
    check(not torch.equal(ref.read_input(descs2[0], None), big[0].reshape(-1)), "a write to an input file is seen")
    ref.drop_input_files(descs2)
    check(not any(n.startswith("in_2_") for n in os.listdir(d)), "input files removed after the call")

    # Without the library (CPU worker or load failure): files, said in the log.
    cpu = wire.RefSlots(d, "cpu", xsock=5)
    cpu.plan(xs, refs)
    check(cpu.ex is None and cpu.note == "files", "CPU jobs use files")
    verify_cuda.available = lambda: False
    nolib = wire.RefSlots(d, "cuda", xsock=5)
    nolib.plan(xs, refs)
    check(nolib.ex is None and nolib.note.startswith("files ("), f"no library: {nolib.note}")
    print(f"exchange_test: {len(FAILS)} failed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
