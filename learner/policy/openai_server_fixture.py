"""Writes a tiny random Qwen2 checkpoint with the ChatML tokenizer next to it,
for the OpenAI-compatible server's tests (made here, nothing from a hub).

  openai_server_fixture.py OUT_DIR [SEED]

OUT_DIR/tokenizer.json   the small ChatML BPE tokenizer (agent/tokenizer/testdata)
OUT_DIR/config.json, model.safetensors
                         Qwen2, vocab = the tokenizer's, weights scaled up so
                         greedy choices are not near-ties
"""
import importlib.util
import json
import os
import sys


def main():
    os.environ["HF_HUB_OFFLINE"] = "1"
    out = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1234
    os.makedirs(out, exist_ok=True)
    spec = importlib.util.spec_from_file_location("tokfix", "agent/tokenizer/testdata/make_tokenizer_fixtures.py")
    tokfix = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tokfix)
    tokfix.make_tokenizer(out, chat_only=True)
    with open(os.path.join(out, "tokenizer.json")) as f:
        tok = json.load(f)
    vocab = len(tok["model"]["vocab"]) + len(tok.get("added_tokens", []))

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                         rope_theta=1000000.0, tie_word_embeddings=False, initializer_range=0.2)
    config.bos_token_id = None
    config.eos_token_id = None
    config.pad_token_id = None
    Qwen2ForCausalLM(config).save_pretrained(out, safe_serialization=True)
    print(f"vocab={vocab}")


if __name__ == "__main__":
    main()
