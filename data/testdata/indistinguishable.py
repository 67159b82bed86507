import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Filter test task: indistinguishable."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 64)

    def forward(self, x):
        return torch.mean(x, dim=1, keepdim=True)


batch_size = 32


def get_inputs():
    return [torch.rand(batch_size, 8192)]


def get_init_inputs():
    return []
