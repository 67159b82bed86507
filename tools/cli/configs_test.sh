#!/usr/bin/env bash
# Every preset and example job under configs/ parses as its subcommand's config
# (kernelrl <cmd> --print_config), and the presets say what they claim: the
# default learn experiment carries the recipe, the prompt and the skill; each
# ablation skips its stages on top of it.
set -euo pipefail
K=tools/cli/kernelrl
REQ=(--base_checkpoint=/ckpt --family_dir=/family)
fail() { echo "FAIL: $*"; exit 1; }
n=0
for f in configs/learn/*.textproto; do
  "$K" learn "${REQ[@]}" --config="$f" --print_config > /dev/null || fail "$f"
  n=$((n + 1))
done
for f in configs/job/*.textproto; do
  "$K" job submit --config="$f" --print_config > /dev/null || fail "$f"
  n=$((n + 1))
done
[ $n -ge 6 ] || fail "only $n config files found"
echo "ok   $n config files parse"

default=$("$K" learn "${REQ[@]}" --print_config)
for want in 'agentic_ppo {' 'skill_text: ' 'max_new_tokens_per_turn: 3328' 'max_turns: 8' 'normalize_advantages: true' 'ablation: "none"'; do
  grep -qF "$want" <<< "$default" || fail "the default experiment has no '$want'"
done
grep -q "skip: true" <<< "$default" && fail "the default experiment skips a stage"
for ablation in no_rft no_value no_rft_no_value; do
  out=$("$K" learn "${REQ[@]}" --ablation=$ablation --print_config)
  grep -qF "ablation: \"$ablation\"" <<< "$out" || fail "$ablation: label"
  grep -qF 'skill_text: ' <<< "$out" || fail "$ablation: the experiment was dropped"
  skips=$(grep -c "skip: true" <<< "$out")
  want=$([ $ablation = no_rft_no_value ] && echo 3 || echo 1)
  [ "$skips" = "$want" ] || fail "$ablation: $skips stages skipped, want $want"
done
echo "ok   the default learn experiment and its ablations"

# learner_device: cpu, cuda or cuda:N; anything else is one line and exit 2 (before any process starts).
for bad in gpu0 cuda:x cuda:-1; do
  rc=0; msg=$("$K" learn "${REQ[@]}" --learner_device=$bad 2>&1) || rc=$?
  [ $rc = 2 ] || fail "--learner_device=$bad: exit $rc, want 2"
  [ "$(wc -l <<< "$msg")" = 1 ] && grep -qF "learner_device" <<< "$msg" || fail "--learner_device=$bad: '$msg'"
done
echo "ok   a bad learner_device is one line and exit 2"
echo PASS
