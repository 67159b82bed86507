import torch
import torch.nn as nn

import kernelrl

lib = kernelrl.load_kernels()


class ModelNew(nn.Module):
    def forward(self, a, b):
        a, b = a.contiguous(), b.contiguous()
        y = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
        lib.matmul(a, b, y, a.shape[0], a.shape[1], b.shape[1])
        return y
