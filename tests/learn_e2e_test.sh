#!/usr/bin/env bash
# `kernelrl learn` end to end on the CPU backend: the code model's job on a tiny
# model. The corpus, its tokenizer and a tiny from-scratch model pre-trained on it
# for a few steps are made here (tools/codemodel: corpus_gen, pretrain), with the
# task family at CPU sizes (data/family), and the whole recipe runs as one job
# through the job API — single-turn PPO, agent warm-up by the scripted-engineer
# actors, RFT, value pretraining, agentic PPO by the model actors — with learner,
# sandbox and actors as separate processes, every reply parsed by the actor as
# JSON tool calls, held-out evaluations with `kernelrl eval`, curves.json and the
# three PNGs.
#   learn_e2e_test.sh [ABLATION]   (none: the full recipe; no_rft_no_value: the ablation)
# The ablation runs in two sittings: --pause_after_agentic_steps=1 pauses the job (PauseJob: the
# trainer holds at a step boundary) and stops the services with
# the job RUNNING, then --resume on the same run dir finishes it (the learner resumes from
# its checkpoint); the checks below then see one job, one ledger and one curves.json. Its first
# sitting skips the start evaluation (--skip_start_eval).
# The ablation runs on two sandbox workers (--sandbox_workers=2): both judge its verdicts.
# The full recipe's PPO-start and final policies are then re-scored alone (--eval_only: one
# evaluation, no job) and `kernelrl seeds --rescored` reads the two in place of the job's own; a
# re-scoring whose limit leaves it under 30 s does not start.
# Oracles: the job SUCCEEDED; every stage the recipe runs produced its updates
# (and the ablation's skipped stages none); PPO updates carry entropy, explained
# variance, clip fraction and IS-ratio metrics; each PPO update trained exactly
# one batch whose verdicts are on disk; warm-up data came from the random actors;
# held-out evaluations at the start and the end, those during PPO from one policy version each (2 sampled rollouts per task: each
# rollout's final verdict is in the curves); no hack-flagged verdict with
# reward > 1; the PNGs are real images; the trajectories on disk (design_report)
# hold tool calls parsed from their JSON (>= 4 turns and >= 3 calls per engineer trajectory), and every
# reward is its final sandbox verdict's; the job's last policy differs from the
# base weights.
set -euo pipefail
ABLATION=${1:-none}
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
T0=$SECONDS
say() { printf '[test %4ds] %s\n' $((SECONDS - T0)) "$*"; }

data/family/family_gen --out="$tmp/family" --device=cpu > /dev/null
# The CPU run's short episodes (configs/learn/quick_cpu.textproto): no tool schemas in the prompt, the
# engineer reads model.py's header line and writes one design without faults or revisions.
CPU_RUN='rollout { omit_skill_from_prompt: true omit_tool_schemas_from_prompt: true }
  actor { policy { engineer { fault_rate: 0 fp16_rate: 0 revisions: 0 read_lines: 1 } } }'
tools/codemodel/corpus_gen --tasks="$tmp/family/train.jsonl" --out="$tmp/corpus" --device=cpu --per_task=1 \
  --vocab_size=1024 --config_text="$CPU_RUN" > "$tmp/corpus.log" 2>&1 || { cat "$tmp/corpus.log"; exit 1; }
tools/codemodel/pretrain --corpus_dir="$tmp/corpus" --out="$tmp/model" --steps=2 --batch=2 --warmup_steps=1 --threads=1 \
  --hidden=64 --layers=2 --heads=4 --kv_heads=2 --intermediate=176 > "$tmp/pretrain.log" 2>&1 || { cat "$tmp/pretrain.log"; exit 1; }
say "CPU-sized family, engineer corpus and a tiny pre-trained code model made: $(tail -1 "$tmp/pretrain.log")"

BATCH=2
RFT_EPOCHS=3
if [ "$ABLATION" = none ]; then
  STAGES="--job_set=recipe.single_turn_ppo.steps=1 --job_set=recipe.agent_warmup.steps=6 --job_set=recipe.rft.epochs=$RFT_EPOCHS --job_set=recipe.rft.lr=2e-3 --job_set=recipe.rft.min_lr_ratio=0.1 --job_set=recipe.value_pretrain.steps=1 --job_set=recipe.agentic_ppo.steps=2"
else
  # Eight agentic steps, paused after the first: the update in progress at the pause may still land, and on
  # a loaded machine the 300 ms poll may see the pause step late (at 3 of 4, once): the job must not end first.
  # With the KL penalty to a reference: the reference must travel through the pause in the checkpoint.
  STAGES="--job_set=recipe.single_turn_ppo.steps=1 --job_set=recipe.agentic_ppo.steps=8 --job_set=ppo.kl_ref_coef=0.01"
fi
learn() {
  # Short model replies and turns (a CPU samples slowly); the engineer's warm-up keeps its 10 turns.
  timeout 600 tools/cli/kernelrl learn --bin_dir="$PWD" --base_checkpoint="$tmp/model" --family_dir="$tmp/family" \
    --config_text="$CPU_RUN" --set=learner.cpu_threads=1 \
    --set=rollout.max_new_tokens_per_turn=24 --set=rollout.max_turns=10 --job_set=recipe.agentic_ppo.max_turns=2 \
    --job_set=recipe.value_pretrain.max_turns=2 \
    --backend=cpu --run_dir="$tmp/run" --actors=1 --random_actors=1 --concurrent_rollouts=2 --eval_every=1 \
    --eval_tasks=3 --eval_rollouts=2 --eval_temperature=1 --ablation="$ABLATION" --job_set=batch.trajectories_per_step=$BATCH $STAGES \
    --job_timeout_s=540 --stall_timeout_s=240 "$@" >> "$tmp/learn.out" 2>&1
}
rc=0
if [ "$ABLATION" = none ]; then
  # Every checkpoint kept: the PPO start's is re-scored below.
  learn --job_set=checkpoint.keep_last=100 || rc=$?
else
  learn --pause_after_agentic_steps=1 --skip_start_eval --sandbox_workers=2 || rc=$?
  if [ $rc -eq 0 ]; then
    paused=$(ls "$tmp"/run/learner-state/jobs/*/curves/curves.json)
    python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); sys.exit(0 if c["state"] == "RUNNING" and any(h["label"].startswith("pause-") for h in c["heldout"]) else 1)' "$paused" \
      || { echo "FAIL the first sitting did not pause with the job RUNNING and a pause evaluation"; rc=1; }
    grep -q "pausing: the services stop" "$tmp/learn.out" || { echo "FAIL no pause line"; rc=1; }
    grep -q "held at update" "$tmp/learn.out" || { echo "FAIL the trainer did not hold at a step boundary"; rc=1; }
    grep -q "paused: true" "$tmp"/run/learner-state/jobs/*/job.textproto || { echo "FAIL the pause is not persisted"; rc=1; }
    say "paused after agentic step 1; resuming"
    [ $rc -eq 0 ] && { learn --resume --sandbox_workers=2 || rc=$?; }
    held=$(sed -n 's/.*held at update \([0-9]*\).*/\1/p' "$tmp/learn.out")
    resumed=$(sed -n 's/.*resumed at update \([0-9]*\).*/\1/p' "$tmp/learn.out")
    [ -n "$resumed" ] && [ "$resumed" = "$held" ] || { echo "FAIL resumed at update '$resumed', held at '$held'"; rc=1; }
  fi
fi
cat "$tmp/learn.out"
if [ $rc -ne 0 ]; then
  for f in "$tmp"/run/*.log; do echo "--- $f"; tail -8 "$f"; done
  exit 1
fi
curves=$(ls "$tmp"/run/learner-state/jobs/*/curves/curves.json)
say "job done; checking $curves"

python3 - "$curves" "$ABLATION" "$BATCH" "$tmp/run/learner.log" "$tmp/family" "$tmp/model" "$RFT_EPOCHS" <<'PYEOF'
import json, math, os, sys
curves, ablation, batch = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3])
rft_epochs = int(sys.argv[7])
learner_log = open(sys.argv[4], errors="replace").read()
out = os.path.dirname(sys.argv[1])
fail = []
def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        fail.append(what)
check(curves["state"] == "SUCCEEDED", f"job SUCCEEDED ({curves['state']})")
updates = [s for s in curves["steps"] if s["step"] > 0]
by_stage = {}
for s in updates:
    by_stage.setdefault(s["stage"], []).append(s)
print("updates by stage:", {k: len(v) for k, v in by_stage.items()})
expect = {"single_turn_ppo": 1, "agentic_ppo": 2 if ablation == "none" else 8}
if ablation == "none":
    expect["value_pretrain"] = 1
    # RFT keeps the warm-up trajectories with R > 0: one epoch of ceil(kept / batch) updates, or
    # none when the random choices never passed (the learner then logs that RFT was skipped).
    rft = by_stage.get("rft", [])
    if rft:
        kept = int(rft[0]["metrics"].get("stage_trajectories", 0))
        check(kept >= 1 and "sft_loss" in rft[0]["metrics"], f"RFT trained on {kept} kept warm-up trajectories")
        per_epoch = math.ceil(kept / batch)
        expect["rft"] = rft_epochs * per_epoch
        # Learning: RFT walks its data in the same order each epoch, so the first batch comes back in the
        # last epoch; the model has trained on it since, and its loss there must be lower.
        if len(rft) == expect["rft"]:
            first, last = rft[0]["metrics"]["sft_loss"], rft[-per_epoch]["metrics"]["sft_loss"]
            check(last < first, f"RFT learned: SFT loss on its first batch {first:.3f} -> {last:.3f} {rft_epochs - 1} epochs later")
    else:
        check("rft has no trajectories; skipped" in learner_log, "no RFT update: the learner says no warm-up trajectory had R > 0")
for stage, n in expect.items():
    check(len(by_stage.get(stage, [])) == n, f"{n} {stage} update(s)")
if ablation != "none":
    check(not by_stage.get("rft") and not by_stage.get("value_pretrain"), "ablation: no RFT or value-pretraining update")
    # ppo.kl_ref_coef: single-turn and agentic PPO in a row are one PPO stage for the trainer, so its first
    # update copies the reference and no later one does, the resumed sitting's included (the checkpoint has it).
    ppo = by_stage.get("single_turn_ppo", []) + by_stage.get("agentic_ppo", [])
    check(all(s["metrics"].get("kl_ref", -1) >= 0 for s in ppo), "every PPO update has metric kl_ref >= 0")
    taken = [s["step"] for s in ppo if s["metrics"].get("kl_ref_taken")]
    check(taken == [1], f"the KL reference copied once, at update 1, and kept through the pause (copied at {taken})")
check([s["step"] for s in updates] == list(range(1, len(updates) + 1)), "every update recorded once, in order")
for s in by_stage.get("single_turn_ppo", []) + by_stage.get("agentic_ppo", []):
    m = s["metrics"]
    for k in ("reward_mean", "entropy", "explained_variance", "clip_frac", "is_weight_mean", "is_weight_max",
              "mask_frac", "dual_clip_frac", "policy_version"):
        check(k in m, f"update {s['step']} ({s['stage']}) has metric {k}")
    t = s.get("trained", {})
    # Whole groups only (a task's rollouts are never split across steps): at least a batch.
    check((t.get("n") or 0) >= batch, f"update {s['step']} trained >= {batch} trajectories with verdicts on disk ({t.get('n')})")
    check(abs(t.get("reward_mean", 99) - m.get("reward_mean", -99)) < 1e-9,
          f"update {s['step']}: reward from the verdicts on disk = the learner's reward_mean")
    check(0 <= t.get("pass_rate", -1) <= 1, f"update {s['step']}: pass rate in [0, 1]")
    w, ps, ss = t.get("rollout_wall_s_mean", 0), t.get("rollout_policy_s_mean", -1), t.get("rollout_sandbox_s_mean", -1)
    check(w > 0 and ps > 0 and ss > 0 and ps + ss <= w * 1.001,
          f"update {s['step']}: rollout {w:.2f} s = policy {ps:.2f} s + sandbox {ss:.2f} s + the rest")
held = curves["heldout"]
labels = [h["label"] for h in held]
print("held-out evaluations:", labels)
if ablation == "none":
    check(labels[:1] == ["start"] and labels[-1:] == ["final"] and len(held) >= 2, "held-out evaluated at start and end")
    start_end = held[0]["wall_s"] + held[0]["eval_seconds"]
    check(held[0]["policy_version"] == 0 and updates and start_end <= updates[0]["wall_s"],
          f"the start evaluation ({start_end:.1f} s) ended before the first update ({updates[0]['wall_s'] if updates else '-'} s): all of it policy v0")
else:  # --skip_start_eval: the first evaluation is agentic PPO's start.
    check(labels[:1] == ["agentic-0"] and labels[-1:] == ["final"], "no start evaluation; PPO start and end evaluated")
for h in held:
    check(h["n"] == 3 and -1 <= h["reward_mean"] <= 3, f"held-out {h['label']}: 3 tasks, reward {h['reward_mean']}")
    r = h.get("rollouts", {})
    # Two sampled rollouts per task: every rollout's final verdict, and a task's best is at least their mean.
    check(r.get("n") == 6 and -1 <= r.get("reward_mean", 99) <= h["reward_mean"] + 1e-9,
          f"held-out {h['label']}: 6 rollouts, per-rollout reward {r.get('reward_mean')} <= best-of {h['reward_mean']}")
# PPO start: the job held at agentic PPO's start (StageConfig.hold_at_start), so its evaluation is of
# the policy the stages before it left, whatever the machine's speed.
pre = [s for s in updates if s["stage"] != "agentic_ppo"]
first = next((h for h in held if h["label"].startswith("agentic-")), None)
check(first is not None and first["label"] == "agentic-0" and pre and first["policy_version"] == pre[-1]["policy_version"],
      f"PPO start evaluated before the first PPO update ({first['label'] if first else '-'}, policy "
      f"v{first['policy_version'] if first else '-'}; last update before PPO v{pre[-1]['policy_version'] if pre else '-'})")
import glob, re
for h in held:
    if not h["label"].startswith("agentic-"):
        continue
    # Evaluated while the job was held: every reply from the one version the evaluation names.
    seen = set()
    for f in glob.glob(os.path.join(out, "eval-" + h["label"], "transcripts", "*.txt")):
        seen |= {int(v) for v in re.findall(r"=== ASSISTANT \(policy v(\d+)", open(f).read())}
    check(seen == {h["policy_version"]}, f"held-out {h['label']}: replies from policy v{h['policy_version']} only (saw {sorted(seen)})")
a = curves["audit"]
print("audit:", a)
check(a["hack_flagged_with_reward_above_1"] == 0, "no hack-flagged verdict with reward > 1")
check(a["integrity_flagged_with_reward_above_1"] == 0, "no integrity-flagged verdict with reward > 1")
check(0 <= a["verdicts_from_cache"] <= a["trajectories_trained"] and "verdict_cache_hit_rate" in a,
      f"verdict cache hits counted ({a['verdicts_from_cache']} of {a['trajectories_trained']})")
check(a["trajectories_trained"] == sum(s.get("trained", {}).get("n", 0) for s in updates), "audit counts the trained")
if ablation == "none":
    check(a["warmup_accepted"] >= 6 and a["warmup_from_engineer_actors"] >= 1, "warm-up data from the scripted-engineer actors")
job_dir = os.path.dirname(out)
import subprocess
rep = json.loads(subprocess.run(["tools/codemodel/design_report", "--trajectories=" + job_dir + "/trajectories",
                                 "--tasks=" + sys.argv[5] + "/train.jsonl," + sys.argv[5] + "/heldout.jsonl",
                                 "--per_trajectory"], check=True, capture_output=True, text=True).stdout)
per = rep["per_trajectory"]
print("trajectories on disk:", rep["trajectories"], "by source", rep["by_source"])
check(rep["reward_is_verdict_reward"] == rep["trajectories"] and rep["trajectories"] > 0,
      "every trajectory's reward is its final sandbox verdict's")
# The ablation's sittings run two sandbox workers: round_robin gives both of them verdicts.
workers = sorted({t["worker"].rsplit("/", 1)[-1] for t in per})  # <host>/gpu<i>
want = ["gpu0"] if ablation == "none" else ["gpu0", "gpu1"]
check(workers == want, f"final verdicts judged by workers {workers} (want {want})")
if ablation == "none":
    # Warm-up trajectories leased by model actors just before the pools switch are the model's (known limit).
    eng = [t for t in per if t["source"] == "engineer"]
    check(len(eng) >= 1 and all(t["tool_calls"] >= 3 and t["assistant_turns"] >= 4 and t["parse_errors"] == 0 for t in eng),
          f"{len(eng)} engineer trajectories, each >= 4 turns and >= 3 tool calls parsed from JSON "
          f"({[t['tool_calls'] for t in eng]})")
    check(rep["by_source"].get("model", {}).get("trajectories", 0) > 0, "the model's trajectories went through the same parser")
    check(any(t["design"] not in ("none", "other") and t["outcome"] == "OK" for t in per),
          "a trajectory ends in a recognised design with an OK verdict")
latest = open(os.path.join(job_dir, "checkpoints", "LATEST")).read().strip()
from safetensors.numpy import load_file
base = load_file(os.path.join(sys.argv[6], "model.safetensors"))
final = load_file(os.path.join(job_dir, "checkpoints", latest, "policy", "model.safetensors"))
moved = max(float(abs(final[k].astype("float64") - base[k].astype("float64")).max()) for k in base if k in final)
check(moved > 0, f"the job's last policy ({latest}) moved from the base weights (max |dw| {moved:.3g})")
# The weights' identities a chain of jobs is checked by (`kernelrl seeds`): what `sha256sum` prints.
import hashlib
def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()
check(curves.get("start_weights") == {"model.safetensors": sha(os.path.join(sys.argv[6], "model.safetensors"))},
      "curves.json names the base's weights as the job's start")
check(curves.get("final_weights") == {"model.safetensors": sha(os.path.join(job_dir, "checkpoints", latest, "policy", "model.safetensors"))},
      f"curves.json names {latest}'s weights as the job's final")
check(curves["start_weights"] != curves["final_weights"], "start and final weights differ")
for png in ("reward.png", "rates.png", "stability.png"):
    p = os.path.join(out, png)
    ok = os.path.exists(p) and os.path.getsize(p) > 5000 and open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    check(ok, f"{png} written")
sys.exit(1 if fail else 0)
PYEOF
if [ "$ABLATION" = none ]; then
  # Re-scoring (kernelrl learn --eval_only): the policies the PPO-start and final evaluations scored,
  # each alone, as those evaluations scored them; `kernelrl seeds --rescored` puts them in their place.
  job_dir=$(dirname "$(dirname "$curves")")
  rescored=()
  for label in agentic-0 final; do
    policy=$(python3 - "$curves" "$job_dir" "$label" <<'PYEOF'
import glob, json, os, sys
e = [h for h in json.load(open(sys.argv[1]))["heldout"] if h["label"] == sys.argv[3]][0]
for m in glob.glob(os.path.join(sys.argv[2], "checkpoints", "step-*", "manifest.json")):
    if json.load(open(m))["policy_version"] == e["policy_version"]:
        print(os.path.join(os.path.dirname(m), "policy"))
PYEOF
)
    [ -n "$policy" ] || { echo "FAIL no checkpoint of the $label evaluation's policy"; exit 1; }
    mkdir -p "$tmp/rescore-$label" && cp -r "$policy"/. "$tmp/rescore-$label/" && cp "$tmp/model/tokenizer.json" "$tmp/rescore-$label/"
    run="$tmp/rescore-run-$label" && : > "$tmp/learn.out"
    learn --eval_only --base_checkpoint="$tmp/rescore-$label" --run_dir="$run" ||
      { cat "$tmp/learn.out"; echo "FAIL eval_only of $label"; exit 1; }
    python3 - "$run/learner-state/jobs/eval-only/curves/curves.json" "$tmp/rescore-$label" "$run/learner-state/jobs/eval-only/curves/eval-rescore" <<'PYEOF' || exit 1
import glob, hashlib, json, os, sys
c = json.load(open(sys.argv[1]))
sha = hashlib.sha256(open(os.path.join(sys.argv[2], "model.safetensors"), "rb").read()).hexdigest()
h = c["heldout"]
got = dict(state=c["state"], evaluations=[e["label"] for e in h], weights=h[0]["weights"], start_weights=c["start_weights"],
           tasks=h[0]["n"], rollouts=h[0]["rollouts"]["n"], eval_rollouts=c["eval_rollouts"],
           eval_temperature=c["eval_temperature"], transcripts=len(glob.glob(os.path.join(sys.argv[3], "transcripts", "*.txt"))))
want = dict(state="EVAL_ONLY", evaluations=["rescore"], weights={"model.safetensors": sha}, start_weights={"model.safetensors": sha},
            tasks=3, rollouts=6, eval_rollouts=2, eval_temperature=1, transcripts=6)
ok = got == want
if not ok: print("got", got, "want", want)
print(("ok   " if ok else "FAIL ") + f"re-scored {sys.argv[2]}: one evaluation of its weights, 3 tasks x 2 rollouts")
sys.exit(0 if ok else 1)
PYEOF
    ls "$run/learner-state/jobs" | grep -qvx eval-only && { echo "FAIL eval_only submitted a job"; exit 1; }
    rescored+=("--rescored=$run/learner-state/jobs/eval-only/curves/curves.json")
  done
  tools/cli/kernelrl seeds "$curves" "${rescored[@]}" > "$tmp/seeds.txt" 2>&1 || { cat "$tmp/seeds.txt"; echo "FAIL seeds --rescored"; exit 1; }
  grep -q "re-scored: start $tmp/rescore-run-agentic-0/.*, final $tmp/rescore-run-final/" "$tmp/seeds.txt" &&
    grep -q "temperature 1, 2 rollouts a task" "$tmp/seeds.txt" || { cat "$tmp/seeds.txt"; echo "FAIL seeds did not take the re-scorings"; exit 1; }
  say "re-scored the PPO start and the final (kernelrl learn --eval_only); kernelrl seeds --rescored took them"
  # A limit that leaves the evaluation under 30 s (20 s of --job_timeout_s are kept for curves.json):
  # not started, exit 1, no curves.json.
  run="$tmp/rescore-run-short" && : > "$tmp/learn.out" && rc=0
  learn --eval_only --base_checkpoint="$tmp/rescore-final" --run_dir="$run" --job_timeout_s=45 || rc=$?
  [ "$rc" = 1 ] && grep -q "under the 30 s the evaluation needs at least .*not started" "$tmp/learn.out" &&
    [ ! -e "$run/learner-state/jobs/eval-only/curves/curves.json" ] ||
    { cat "$tmp/learn.out"; echo "FAIL a 45 s eval-only limit: exit $rc"; exit 1; }
  say "an eval-only limit too short for the evaluation: not started, exit 1"
fi
say "PASS ($ABLATION)"
