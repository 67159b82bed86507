import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Filter test task: compile_differs."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 64)

    def forward(self, x):
        if torch.compiler.is_compiling():
            return self.linear(x) * 2
        return self.linear(x)


batch_size = 32


def get_inputs():
    return [torch.rand(batch_size, 64)]


def get_init_inputs():
    return []
