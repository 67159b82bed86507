import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU (a 1 GiB-input copy of KernelBench level1/19_ReLU)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 1024
dim = 262144


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
