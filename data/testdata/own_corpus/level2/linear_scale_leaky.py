# Our own KernelBench-format program (not from KernelBench): a stand-in corpus
# for data/decontamination_test where ../shared/kernelbench is absent (CI).
import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model: a dense layer, a constant scale, then a leaky ReLU."""

    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super(Model, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier = multiplier
        self.leaky_relu = nn.LeakyReLU(negative_slope)

    def forward(self, x):
        x = self.gemm(x)
        x = x * self.multiplier
        x = self.leaky_relu(x)
        return x


batch_size = 64
in_features = 8192
out_features = 2048
multiplier = 1.5
negative_slope = 0.05


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, multiplier, negative_slope]
