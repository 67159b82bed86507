"""The output exchange's bookkeeping on CPU (CI has no GPU): slot layout,
regions for pipelined sets, the candidate's slot writes, the reference's
reads, re-poisoning after every check, profile re-checks in region 0, and
the fall-back to files. The device memory is faked with a host buffer; the
real allocation, fd passing and kernels are verify_cuda_test.py's (GPU).

    python3 exchange_test.py"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import candidate  # noqa: E402
import reference  # noqa: E402
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
    refs = [torch.randn(3, 5, generator=g), 7, torch.randint(0, 9, (100,), generator=g)]
    outs = reference.Outputs(d, "cuda", xsock=5)
    slots = candidate.ExchangeSlots(5, device="cpu")

    # Layout: one slot per tensor output, 512-byte aligned, two regions.
    offer0 = outs.offer(refs, 0, 2)
    check(offer0 is not None and outs.note == "gpu", f"set 0 offered GPU slots ({outs.note})")
    check(offer0["slots"] == [[0, 60], None, [512, 800]], f"region 0 slots {offer0['slots']}")
    offer1 = outs.offer(refs, 1, 2)
    check(offer1["slots"] == [[1536, 60], None, [2048, 800]], f"region 1 slots {offer1['slots']}")
    check(FakeExchange.made[-1].nbytes == 3072, "one allocation for both regions")
    check(bool((FakeExchange.made[-1].buf == 0xFF).all()), "allocation starts poisoned")

    # Candidate writes set 0 into region 0; the reference reads and compares.
    check(slots.accept(offer0) == "" and slots.status() == "gpu", "candidate maps the exchange")
    metas = candidate.export_outputs(refs, d, "0", slots)
    check([m.get("slot") for m in metas] == [0, None, 2] and not os.listdir(d), f"outputs went to slots: {metas}")
    why = [reference.compare(r, m, outs, j, 0) for j, (r, m) in enumerate(zip(refs, metas)) if isinstance(r, torch.Tensor)]
    check(why == [None, None], f"correct outputs pass from slots: {why}")
    wrong = [refs[0] + 1, 7, refs[2]]
    slots.accept(offer1)
    metas1 = candidate.export_outputs(wrong, d, "1", slots)
    why = reference.compare(refs[0], metas1[0], outs, 0, 1)
    check(why is not None and "max abs err" in why, f"a wrong output fails from region 1: {why}")

    # After a check the slots are poisoned: stale bytes never pass again.
    outs.poison(0)
    check(bool(torch.isnan(FakeExchange.made[-1].tensor(0, 15, torch.float32)).all()), "region 0 re-poisoned")
    why = reference.compare(refs[0], {**metas[0]}, outs, 0, 0)
    check(why is not None, f"a read after the check (slots popped) fails: {why}")
    outs.by_set[2] = outs.regions[0]
    why = reference.compare(refs[0], {**metas[0]}, outs, 0, 2)
    check(why is not None and "NaN" in why, f"an unwritten (poisoned) slot fails as NaN: {why}")

    # Slot claims the reference did not make fail; so does a size mismatch.
    outs.by_set[3] = outs.regions[1]
    check(reference.compare(refs[2], {**metas[2], "slot": 0}, outs, 2, 3) == "output slot missing or of the wrong size",
          "a slot index other than the output's fails")
    offer_big = outs.offer([torch.randn(4, 5), 7, refs[2]], 4, 2)
    check(offer_big is None, "a set whose outputs differ in size gets no slots (files)")
    slots.accept(offer_big)
    metas4 = candidate.export_outputs([torch.randn(4, 5), 7, refs[2]], d, "4", slots)
    check("file" in metas4[0] and "slot" not in metas4[0], "and the candidate then writes files")

    # Profile re-checks: region 0, whatever the last set's region was.
    slots.accept(offer1)
    slots.for_rechecks()
    metas_p = candidate.export_outputs(refs, d, "p0", slots)
    why = reference.compare(refs[0], metas_p[0], outs, 0, reference.Outputs.RECHECK)
    check(metas_p[0].get("slot") == 0 and why is None, f"re-checks go through region 0: {why}")
    outs.poison(reference.Outputs.RECHECK)
    check(bool(torch.isnan(FakeExchange.made[-1].tensor(0, 15, torch.float32)).all()), "re-check slot re-poisoned")

    # Without the library (CPU worker or load failure): files, said in the log.
    cpu = reference.Outputs(d, "cpu", xsock=5)
    check(cpu.offer(refs, 0, 2) is None and cpu.note == "files", "CPU jobs use files")
    verify_cuda.available = lambda: False
    nolib = reference.Outputs(d, "cuda", xsock=5)
    check(nolib.offer(refs, 0, 2) is None and nolib.note.startswith("files ("), f"no library: {nolib.note}")
    print(f"exchange_test: {len(FAILS)} failed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
