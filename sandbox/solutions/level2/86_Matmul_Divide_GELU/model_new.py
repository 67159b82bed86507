import torch
import torch.nn as nn

import kernelrl

lib = kernelrl.load_kernels()


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)
        self.divisor = divisor

    def forward(self, x):
        x = x.contiguous()
        lin = self.linear
        y = torch.empty(x.shape[0], lin.out_features, dtype=x.dtype, device=x.device)
        lib.gemm_div_gelu(x, lin.weight, lin.bias, y, x.shape[0], lin.in_features, lin.out_features, float(self.divisor))
        return y
