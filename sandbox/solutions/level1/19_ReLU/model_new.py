import torch
import torch.nn as nn

import kernelrl

lib = kernelrl.load_kernels()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.relu_forward(x, y, x.numel())
        return y
