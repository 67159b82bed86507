import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Filter test task: stochastic."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 64)

    def forward(self, x):
        return F.dropout(self.linear(x), p=0.3, training=True)


batch_size = 32


def get_inputs():
    return [torch.rand(batch_size, 64)]


def get_init_inputs():
    return []
