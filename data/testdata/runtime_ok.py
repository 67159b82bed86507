import torch
import torch.nn as nn


class Model(nn.Module):
    """Filter test task: heavy enough for a >= 1 ms eager run on one CPU thread."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1024, 1024) / 32)

    def forward(self, x):
        return torch.tanh(torch.matmul(x, self.weight))


batch_size = 512


def get_inputs():
    return [torch.rand(batch_size, 1024)]


def get_init_inputs():
    return []
