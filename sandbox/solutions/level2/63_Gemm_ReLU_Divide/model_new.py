import torch
import torch.nn as nn

import kernelrl

lib = kernelrl.load_kernels()


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, divisor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.divisor = divisor

    def forward(self, x):
        x = x.contiguous()
        lin = self.linear
        y = torch.empty(x.shape[0], lin.out_features, dtype=x.dtype, device=x.device)
        lib.gemm_relu_div(x, lin.weight, lin.bias, y, x.shape[0], lin.in_features, lin.out_features, float(self.divisor))
        return y
