"""Writes what `kernelrl up`'s quickstart job trains on, made here, nothing from a hub.

  up_quickstart.py OUT_DIR REPO_DIR [--gpu=SHARED_DIR]

  OUT_DIR/model/        a tiny random Qwen2 checkpoint (HF safetensors, config.json) with the
                        ChatML tokenizer (tokenizer.json) the actors and the learner share
  OUT_DIR/tasks.jsonl   kernelrl.v1.Task per line: the CPU-sized KernelBench tasks in
                        REPO_DIR/sandbox/testdata/cpu_tasks (the scripted policy has a solution
                        for each in REPO_DIR/sandbox/solutions/cpu); with --gpu, the KernelBench
                        level-1 tasks of SHARED_DIR/kernelbench that have a CUDA solution in
                        REPO_DIR/sandbox/solutions/level1

Trusted setup code, run once per run directory (torch, transformers and tokenizers come from
tools/setup.sh). Prints the two paths.
"""
import glob
import importlib.util
import json
import os
import sys


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_model(out, repo):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = load_module(os.path.join(repo, "agent/tokenizer/testdata/make_tokenizer_fixtures.py"), "tokfix")
    tok.make_tokenizer(out, chat_only=True)
    with open(os.path.join(out, "tokenizer.json")) as f:
        spec = json.load(f)
    vocab = len(spec["model"]["vocab"]) + len(spec.get("added_tokens", []))
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
    config = Qwen2Config(vocab_size=vocab, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                         rope_theta=1000000.0, tie_word_embeddings=False, initializer_range=0.02)
    Qwen2ForCausalLM(config).save_pretrained(out, safe_serialization=True)
    return vocab


def make_gpu_tasks(path, repo, shared):
    n = 0
    with open(path, "w") as f:
        for sol in sorted(glob.glob(os.path.join(repo, "sandbox/solutions/level1/*/"))):
            task_id = os.path.basename(os.path.dirname(sol))
            src = os.path.join(shared, "kernelbench/level1", task_id + ".py")
            if not os.path.exists(src):
                continue
            with open(src) as s:
                task = {"id": task_id, "reference_source": s.read(), "level": 1, "inputs": {"device": "cuda"}}
            f.write(json.dumps(task) + "\n")
            n += 1
    return n


def make_tasks(path, repo):
    n = 0
    with open(path, "w") as f:
        for src in sorted(glob.glob(os.path.join(repo, "sandbox/testdata/cpu_tasks/*.py"))):
            task_id = os.path.splitext(os.path.basename(src))[0]
            if not os.path.isdir(os.path.join(repo, "sandbox/solutions/cpu", task_id)):
                continue
            with open(src) as s:
                task = {"id": task_id, "reference_source": s.read(), "level": 1,
                        "inputs": {"device": "cpu", "dtype": "float32"}}
            f.write(json.dumps(task) + "\n")
            n += 1
    return n


def main():
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    out, repo = sys.argv[1], sys.argv[2]
    gpu_shared = next((a.split("=", 1)[1] for a in sys.argv[3:] if a.startswith("--gpu=")), None)
    model = os.path.join(out, "model")
    os.makedirs(model, exist_ok=True)
    vocab = make_model(model, repo)
    tasks = os.path.join(out, "tasks.jsonl")
    n = make_gpu_tasks(tasks, repo, gpu_shared) if gpu_shared else make_tasks(tasks, repo)
    if n == 0:
        sys.exit(f"no {'GPU' if gpu_shared else 'CPU'} task with a scripted solution under {repo}")
    print(f"model={model} (vocab {vocab})")
    print(f"tasks={os.path.join(out, 'tasks.jsonl')} ({n} tasks)")


if __name__ == "__main__":
    main()
