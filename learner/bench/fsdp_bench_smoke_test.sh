#!/usr/bin/env bash
# The GPU benchmark's path (rank spawning, sharding, steps, the JSON line) on
# the CPU with 2 ranks, so that a GPU call does not find its bugs.
set -euo pipefail
out=$("$TEST_SRCDIR/kernelrl/learner/bench/fsdp_bench" smoke 2)
echo "$out"
echo "$out" | grep -q '"bench": "fsdp_ppo_step"'
echo "$out" | grep -q '"gpus": 2'
echo "$out" | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); assert r["tokens_per_s_per_gpu"] > 0 and r["planned_gib"] > 0, r'
# The same with LoRA adapters: frozen base shards, adapters trained.
out=$("$TEST_SRCDIR/kernelrl/learner/bench/fsdp_bench" --lora_rank=4 smoke 2)
echo "$out"
echo "$out" | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); assert r["lora_rank"] == 4 and r["tokens_per_s_per_gpu"] > 0, r'
