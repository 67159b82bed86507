import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Filter test task: too_fast."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 64)

    def forward(self, x):
        return x + 1.0


batch_size = 32


def get_inputs():
    return [torch.rand(4, 4)]


def get_init_inputs():
    return []
