import torch
import torch.nn as nn

import kernelrl

lib = kernelrl.load_kernels()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        predictions = predictions.contiguous()
        targets = targets.contiguous()
        out = torch.empty((), dtype=predictions.dtype, device=predictions.device)
        lib.mse_loss(predictions, targets, out, predictions.numel(), predictions.shape[-1])
        return out
