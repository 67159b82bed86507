import torch
import torch.nn as nn

import kernelrl

lib = kernelrl.load_kernels()


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier = multiplier
        self.negative_slope = negative_slope

    def forward(self, x):
        x = x.contiguous()
        lin = self.gemm
        y = torch.empty(x.shape[0], lin.out_features, dtype=x.dtype, device=x.device)
        lib.gemm_mul_leaky(x, lin.weight, lin.bias, y, x.shape[0], lin.in_features, lin.out_features, float(self.multiplier))
        return y
