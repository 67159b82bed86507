import torch
import torch.nn as nn


class Model(nn.Module):
    """A 4352^3 fp32 GEMM: the ~10 ms size of tests/bench/trusted_timing_h100.sh.
    Its honest candidate is gpu_solutions/matmul_tiled (an own shared-memory
    tiled kernel, not cuBLAS), ~3.4 ms at 3072^3 on an H100, so about
    (4352/3072)^3 x 3.4 = 9.7 ms here (not yet measured)."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


N = 4352


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
