"""Writes reference fixtures for the learner's C++ tests, from HF libraries.

  make_fixtures.py model OUT_DIR      tiny random Qwen2 (one with YaRN RoPE) and Llama checkpoints,
                                      logits on random ids, 64 greedy tokens
  (the tokenizer fixtures: agent/tokenizer/testdata/make_tokenizer_fixtures.py)

Everything is generated at test time from fixed seeds; nothing comes from a hub.
"""
import json
import os
import random
import struct
import sys


def write_f32(path, values):
    with open(path, "wb") as f:
        f.write(struct.pack("<%df" % len(values), *values))


def make_model(out):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(1234)
    cases = {
        # Qwen2: q/k/v bias, untied head, large theta; sharded on save.
        "qwen2": (Qwen2ForCausalLM, Qwen2Config(
            vocab_size=384, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
            rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
            initializer_range=0.1), "20KB"),
        # Llama: tied embeddings, llama3 RoPE scaling, MHA with head_dim != hidden/heads.
        "llama": (LlamaForCausalLM, LlamaConfig(
            vocab_size=320, hidden_size=48, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=4, head_dim=16, max_position_embeddings=2048,
            rope_theta=500000.0, tie_word_embeddings=True, initializer_range=0.1,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64}), None),
        # Qwen2.5's long-context form: YaRN scaling, written as the 128K configs
        # do (rope_scaling type yarn); 48-token inputs pass the original 32.
        "qwen2_yarn": (Qwen2ForCausalLM, Qwen2Config(
            vocab_size=384, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
            rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False, initializer_range=0.1,
            rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}), None),
    }
    index = {}
    for name, (cls, cfg, shard) in cases.items():
        cfg.bos_token_id = None
        cfg.eos_token_id = None
        cfg.pad_token_id = None
        model = cls(cfg).eval().float()
        with torch.no_grad():  # HF init leaves norms at 1 and biases at 0: perturb them so they are tested.
            for pname, p in model.named_parameters():
                if "norm" in pname:
                    p.copy_(1.0 + 0.2 * torch.randn_like(p))
                elif pname.endswith("bias"):
                    p.normal_(0.0, 0.2)
        d = os.path.join(out, name)
        if shard:
            model.save_pretrained(d, max_shard_size=shard)
        else:
            model.save_pretrained(d)
        g = torch.Generator().manual_seed(7)
        ids = torch.randint(0, cfg.vocab_size, (2, 48), generator=g)
        with torch.no_grad():
            logits = model(ids).logits.float()
        write_f32(os.path.join(d, "logits.f32"), logits.flatten().tolist())
        prompt = torch.randint(0, cfg.vocab_size, (1, 8), generator=g)
        with torch.no_grad():
            gen = model.generate(prompt, max_new_tokens=64, min_new_tokens=64, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)
        index[name] = {
            "ids": ids.tolist(),
            "logits_shape": list(logits.shape),
            "prompt": prompt[0].tolist(),
            "greedy": gen[0, prompt.shape[1]:].tolist(),
        }
    with open(os.path.join(out, "fixtures.json"), "w") as f:
        json.dump(index, f)


def hf_logits(model_dir):
    """Loads a checkpoint WE wrote with transformers; logits for ids.json."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with open(os.path.join(model_dir, "ids.json")) as f:
        ids = torch.tensor(json.load(f))
    with torch.no_grad():
        logits = model(ids).logits.float()
    write_f32(os.path.join(model_dir, "hf_logits.f32"), logits.flatten().tolist())


def peft_logits(model_dir):
    """Our LoRA checkpoint read by PEFT: the base weights from a copy without
    the adapter files, then PeftModel on the adapter files; logits for ids.json."""
    import shutil
    import tempfile

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base_dir = tempfile.mkdtemp()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(model_dir, name), base_dir)
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, model_dir).eval()
    with open(os.path.join(model_dir, "ids.json")) as f:
        ids = torch.tensor(json.load(f))
    with torch.no_grad():
        logits = model(ids).logits.float()
        # transformers with PEFT installed reads the directory itself as the adapted model.
        direct = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()(ids).logits.float()
    if not torch.allclose(direct, logits, atol=1e-5):
        sys.exit(f"from_pretrained(dir) differs from PeftModel by {(direct - logits).abs().max().item()}")
    write_f32(os.path.join(model_dir, "peft_logits.f32"), logits.flatten().tolist())


if __name__ == "__main__":
    mode, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    {"model": make_model, "hf_logits": hf_logits, "peft_logits": peft_logits}[mode](out)
