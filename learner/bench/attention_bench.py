"""Causal attention fwd+bwd per SDPA backend at the Qwen2-0.5B shape (bf16).

Decides which backend the learner's training path asks for: prints one JSON
line per (backend, GQA handling) with the median ms of fwd+bwd over fresh
random inputs, timed with CUDA events in this one process.
Run on the GPU machine: python3 learner/bench/attention_bench.py [SEQ]
"""
import json
import statistics
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

T = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
H, KVH, D = 14, 2, 64
dev = "cuda"


def make():
    q = torch.randn(1, H, T, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(1, KVH, T, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(1, KVH, T, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    return q, k, v


def step(backend, gqa):
    q, k, v = make()
    g = torch.randn(1, H, T, D, device=dev, dtype=torch.bfloat16)
    with sdpa_kernel([backend]):
        if gqa:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            r = H // KVH
            o = F.scaled_dot_product_attention(q, k.repeat_interleave(r, 1), v.repeat_interleave(r, 1), is_causal=True)
        o.backward(g)


def bench(backend, gqa):
    try:
        for _ in range(3):
            step(backend, gqa)
    except Exception as e:  # backend does not take this shape
        return {"backend": backend.name, "gqa": gqa, "error": str(e).splitlines()[0][:160]}
    times = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        step(backend, gqa)
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    ms = statistics.median(times)
    flops = 3.5 * 4 * H * D * T * T / 2  # fwd + 2.5x bwd, causal half
    return {"backend": backend.name, "gqa": gqa, "seq": T, "ms": round(ms, 3), "tflops": round(flops / ms / 1e9, 1)}


for b in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
    for gqa in (True, False):
        print(json.dumps(bench(b, gqa)), flush=True)
