# Our own KernelBench-format program (stand-in corpus, see linear_scale_leaky.py).
import torch
import torch.nn as nn


class Model(nn.Module):
    """A 3x3 convolution followed by ReLU."""

    def __init__(self, channels_in, channels_out):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(channels_in, channels_out, kernel_size=3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(8, 16, 64, 64)]


def get_init_inputs():
    return [16, 32]
