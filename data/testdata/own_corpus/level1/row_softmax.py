# Our own KernelBench-format program (stand-in corpus, see linear_scale_leaky.py).
import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over the last dimension."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(256, 4096)]


def get_init_inputs():
    return []
