import torch
import torch.nn as nn

import kernelrl

lib = kernelrl.load_kernels()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        A = A.contiguous()
        B = B.contiguous()
        C = torch.empty_like(B)
        lib.diag_matmul(A, B, C, B.shape[0], B.shape[1])
        return C
