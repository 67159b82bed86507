"""HF transformers baseline for learner_bench: the same configs, same GPU.

  hf_bench.py train SEQ     fwd+bwd tokens/s (Qwen2-0.5B shape, bf16, sdpa)
  hf_bench.py memory SEQ    peak GPU memory of one fwd+bwd step
  hf_bench.py decode B P N [SHAPE]
                            generate(): B prompts of P random tokens, N new (greedy);
                            B may list sizes (32,128,256: one line each); SHAPE
                            0.5b (default: Qwen2-0.5B) or 7b (Qwen2.5-7B)
Prints one JSON line per figure, like learner_bench and engine_bench.
"""
import json
import sys
import time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


def config(shape="0.5b"):
    if shape == "7b":
        return Qwen2Config(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                           num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768,
                           rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
                           bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                       num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                       rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                       bos_token_id=None, eos_token_id=None, pad_token_id=None)


def model(train, shape="0.5b"):
    torch.manual_seed(0)
    with torch.device("cuda"):  # Weights drawn on the GPU (a 7B on the CPU takes minutes).
        m = Qwen2ForCausalLM._from_config(config(shape), attn_implementation="sdpa", dtype=torch.bfloat16)
    m.train(train)
    return m


def train_flops(c, T):
    h, v, L = c.hidden_size, c.vocab_size, c.num_hidden_layers
    q, kv, i = c.num_attention_heads * 64, c.num_key_value_heads * 64, c.intermediate_size
    layer = h * q + 2 * h * kv + q * h + q + 2 * kv + 3 * h * i + 2 * h
    n = L * layer + h
    attn = 2.0 * 2.0 * L * q * T * T / 2.0
    return 3.0 * (2.0 * (n + v * h) * T + attn)


def step(m, T):
    ids = torch.randint(0, 151936, (1, T), device="cuda")
    loss = m(input_ids=ids, labels=ids).loss
    loss.backward()


def train(T):
    m = model(True)
    for _ in range(3):
        step(m, T)
    torch.cuda.synchronize()
    iters = 10
    t0 = time.perf_counter()
    for _ in range(iters):
        step(m, T)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / iters
    tf = train_flops(m.config, T) / dt / 1e12
    print(json.dumps({"impl": "hf", "bench": "train", "seq": T, "tokens_per_s": round(T / dt, 1),
                      "step_ms": round(dt * 1e3, 2), "tflops": round(tf, 1), "mfu_vs_989": round(tf / 989, 3)}))


def memory(T):
    m = model(True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    try:
        step(m, T)
        torch.cuda.synchronize()
    except torch.OutOfMemoryError:
        print(json.dumps({"impl": "hf", "bench": "memory", "seq": T, "error": "OOM"}))
        return
    print(json.dumps({"impl": "hf", "bench": "memory", "seq": T,
                      "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                      "step_s": round(time.perf_counter() - t0, 3)}))


@torch.no_grad()
def decode(batches, P, N, shape="0.5b"):
    m = model(False, shape)
    V = m.config.vocab_size
    for B in [int(b) for b in str(batches).split(",")]:
        ids = torch.randint(0, V, (B, P), device="cuda")
        mask = torch.ones_like(ids)
        m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, min_new_tokens=8, do_sample=False,
                   pad_token_id=0)
        torch.cuda.synchronize()
        ids = torch.randint(0, V, (B, P), device="cuda")
        t0 = time.perf_counter()
        out = m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=N, min_new_tokens=N, do_sample=False,
                         pad_token_id=0)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        tokens = (out.shape[1] - P) * B
        print(json.dumps({"impl": "hf", "bench": "decode", "shape": shape, "batch": B, "prompt": P, "new": N,
                          "tokens": tokens, "seconds": round(dt, 3), "tokens_per_s": round(tokens / dt, 1),
                          "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}), flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "decode":
        decode(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:6])
    else:
        {"train": train, "memory": memory}[mode](*[int(a) for a in sys.argv[2:]])
