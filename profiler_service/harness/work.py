"""What one call must at least move and compute (WorkEstimate), measured on
the reference: tensor bytes of inputs, outputs, parameters and buffers, and
FLOPs from torch.utils.flop_counter (matmul / conv / attention families;
elementwise ops count 0, so their floor is the memory term)."""
import torch


def _tensor_bytes(values):
    total = 0
    for v in values:
        if isinstance(v, torch.Tensor):
            total += v.numel() * v.element_size()
        elif isinstance(v, (list, tuple)):
            total += _tensor_bytes(v)
    return total


def estimate(model, inputs):
    from torch.utils.flop_counter import FlopCounterMode
    with torch.no_grad():
        counter = FlopCounterMode(display=False)
        with counter:
            out = model(*inputs)
    outs = out if isinstance(out, (list, tuple)) else [out]
    params = list(model.parameters()) + list(model.buffers()) if isinstance(model, torch.nn.Module) else []
    dtypes = [x.dtype for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
    return {
        "input_bytes": float(_tensor_bytes(inputs)),
        "output_bytes": float(_tensor_bytes(outs)),
        "parameter_bytes": float(_tensor_bytes(params)),
        "flops": float(counter.get_total_flops()),
        "dtype": str(dtypes[0]).replace("torch.", "") if dtypes else "",
    }
