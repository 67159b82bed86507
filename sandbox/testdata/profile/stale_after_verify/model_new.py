"""Correct while verified, then fast and wrong (profile-stage test): after the
5 verify calls it returns the previous call's output without computing.
Only the unannounced re-checks of timed calls can catch it. Expected verdict: WRONG_ANSWER."""
import torch
import torch.nn as nn
import kernelrl
lib = kernelrl.load_kernels()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.last = None

    def forward(self, x):
        self.calls += 1
        if self.calls > 5 and self.last is not None and self.last.shape == x.shape:
            return self.last
        y = torch.empty_like(x)
        lib.relu_forward(x, y, x.numel())
        self.last = y
        return y
