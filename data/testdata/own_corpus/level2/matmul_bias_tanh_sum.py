# Our own KernelBench-format program (stand-in corpus, see linear_scale_leaky.py).
import torch
import torch.nn as nn


class Model(nn.Module):
    """Matrix product with a learned bias, tanh, then a row sum."""

    def __init__(self, k, n):
        super(Model, self).__init__()
        self.weight = nn.Parameter(torch.randn(k, n))
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, a):
        y = torch.matmul(a, self.weight) + self.bias
        return torch.tanh(y).sum(dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(512, 1024)]


def get_init_inputs():
    return [1024, 256]
