# A KernelBench-format task small enough for the CPU tests of the profiler.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.rand(64, 256)]


def get_init_inputs():
    return [256]
