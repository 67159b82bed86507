import torch
import torch.nn as nn

import kernelrl

lib = kernelrl.load_kernels()


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = torch.empty(x.shape[0], self.fc.out_features, dtype=x.dtype, device=x.device)
        lib.linear_relu(x, self.fc.weight, self.fc.bias, y, x.shape[0], self.fc.in_features, self.fc.out_features)
        return y
