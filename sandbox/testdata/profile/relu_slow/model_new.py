"""Honest but slow ReLU (profile-stage test): correct on every set, about 50x
the work of eager torch.relu, so it must earn reward 1, never more."""
import torch
import torch.nn as nn
import kernelrl
lib = kernelrl.load_kernels()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        lib.relu_slow(x, y, x.numel(), 50)
        return y
