import torch
import torch.nn as nn

import kernelrl

lib = kernelrl.load_kernels()


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = x.contiguous()
        lin = self.gemm
        y = torch.empty(x.shape[0], lin.out_features, dtype=x.dtype, device=x.device)
        lib.gemm_add_relu(x, lin.weight, self.bias, y, x.shape[0], lin.in_features, lin.out_features, float(0.0))
        return y
