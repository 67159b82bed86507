#!/usr/bin/env bash
# The code model on the GPU (docs/CODEMODEL.md), in calls of <= 600 s:
#
#   here:   tools/device_codemodel.sh --stage     # tools/device_ops.sh --stage (.devcarry/ops) and
#                                                 # .devcarry/codemodel: corpus_gen, pretrain, design_report, the task set
#   device: [SEED=1] [ABLATION=none|no_rft|no_value] tools/device_codemodel.sh
#           # run tool, carry [".devcarry/codemodel"] (the services' binaries travel in it as ops.tgz)
#
# A call cannot hold the 21 baselines (~260 s on one GPU) and a job, so the run takes a base call
# (the baselines, then the corpus, 119 s, and 2,800 pre-training steps, 75 s with loading, H200, 2026-12-02), then job calls:
#   a. LEARNER_DEVICE=cuda:1 JOBS=" " PRECOMPUTE_WALL=290 tools/device_codemodel.sh
#      (the baselines on GPU 0 with nothing beside them, then pre-training on GPU 1) -> base.tgz,
#      results.tgz (baselines.jsonl)
#   b. here: tools/device_codemodel.sh --stage-in DIR   # DIR holds call a's base.tgz and results.tgz
#      device: BASE_IN=.devcarry/codemodel/in/base.tgz BASELINES_IN=.devcarry/codemodel/in/baselines.jsonl \
#              LEARNER_DEVICE=cuda:1 [SEED=..] [JOBS=..] tools/device_codemodel.sh
#   c. seeds after the first: --stage-in a directory that also holds call b's logs.tgz, and add
#      WARMUP_FROM=.devcarry/codemodel/in/warmup_job: each job takes b's warm-up set instead of collecting one.
#   d. a seed's PPO over more calls (or sessions): CONTINUE=1 tools/device_codemodel.sh --stage-in DIR, DIR
#      holding the earlier call's final_policy-*.tgz (the policy with its critic/) and results.tgz; then
#      CONTINUE_FROM=.devcarry/codemodel/in/continue.tgz BASELINES_IN=... [SEED=..] tools/device_codemodel.sh:
#      agentic PPO alone from that policy and critic (warm-up, RFT and value pretraining skipped; the
#      optimizers' moments restart), no evaluation before PPO (the earlier call's final one scored that
#      policy; the cut holds its time for this call's final one), its task order reseeded by its place in
#      the chain, and the tasks whose every group in the earlier call had one reward (the archive's
#      deferred_tasks) last in each task cycle. FINAL_EVAL=0 in every call of a chain but the last: a
#      chain needs its first call's PPO-start evaluation and its last call's final one
#      (`kernelrl seeds A/curves.json+B/curves.json`).
#   e. more seeds of the PPO stage from one RFT policy: a call that evaluated its PPO start also returns
#      ppo_start_policy-<seed>-<ablation>.tgz (the policy and critic that evaluation scored; the job keeps
#      every checkpoint for it). CONTINUE=ppo_start tools/device_codemodel.sh --stage-in DIR, then
#      CONTINUE_FROM as in d. with another SEED: all PPO from that start; the seed's chain reads its
#      start from the first call's PPO-start evaluation (`kernelrl seeds FIRST/curves.json+...`).
#   f. a policy re-scored (EVAL_ONLY=1 with CONTINUE_FROM=ARCHIVE, EVAL_TEMP, EVAL_ROLLOUTS): no job; the archive's
#      policy scored once on the held-out tasks (kernelrl learn --eval_only), sampled, each task's rollout k drawing
#      the same random numbers for every policy so scored. A chain's PPO start (ppo_start_policy-*.tgz) and final
#      re-scored alike replace its greedy evaluations in `kernelrl seeds CHAIN... --rescored=DIR/curves.json ...`.
#
# On the device, in order:
#  1. eager + torch.compile baselines of the task set (3 training + 4 held-out tasks per family:
#     12 held-out, split by shape and by composition), through the executor path, then the
#     engineer corpus on the CPU (corpus_gen --device=cuda, training tasks of the whole
#     family, SEED) with its BPE tokenizer;
#  2. pre-training (SFT) of the from-scratch model on the corpus, bf16 on the GPU (pretrain; Qwen2
#     shape PRETRAIN_ARGS, PRETRAIN_STEPS steps): the base checkpoint, with its SHA-256;
#  3. `kernelrl learn` on the small task set: warm-up by the scripted engineer against the CUDA sandbox,
#     RFT, value pretraining, agentic PPO (the family preset: 8 turns, 3,328 tokens a turn), held-out
#     evaluations at the start (the SFT model), at PPO start (the RFT policy) and at the end, EVAL_ROLLOUTS
#     sampled rollouts per task; the job's limit (--job_timeout_s: LEARN_WALL + 90 s, or less by DEADLINE) covers
#     the final evaluation: kernelrl learn cuts PPO 1.25x its longest held-out evaluation so far before it;
#  4. design_report over the job's trajectories (tool calls parsed, final designs per family over policy
#     versions) and designs.png; the job's last policy with the tokenizer as final_policy-<seed>-<ablation>.tgz,
#     its SHA-256 printed (score it anywhere: kernelrl eval --policy=checkpoint:DIR --tasks=...).
# SEED seeds the corpus, the initialisation and the job. JOBS="1:none 2:none 1:no_rft" runs several jobs
# on the same base one after another (SEED:ABLATION each, LEARN_WALL + 90 s each: mind the 600 s); separate calls
# give independent seeds of the whole pipeline. Results under $OUT: results.tgz (pretrain.json,
# baselines.tsv, corpus.log, pretrain.log and per job <seed>-<ablation>/: curves.json, report.txt,
# design_report.json, reward.png, rates.png, stability.png, designs.png), final_policy-<seed>-<ablation>.tgz
# per job, logs.tgz (the runs without checkpoints, trajectories included). Rehearse here on the CPU sandbox:
# tools/device_codemodel.sh --stage --cpu, then BACKEND=cpu OUT=DIR tools/device_codemodel.sh (no baselines).
# Knobs: DEADLINE (560: the call's end in s, some 40 under the device's 600 s limit; each job's limit, its final
#   evaluation included, is 45 s before it at the latest and the job is killed 30 s before it (15 s for stopping
#   the services and writing the curves), so that the results are packed in time), CONTINUE_FROM (d. above), TRAIN_PER_FAMILY (--stage: the job's training tasks a family, 3), TRAIN_TASKS
# (--stage: the job's training tasks by id instead, e.g. "train/rr_softmax_384x12288 train/rr_rmsnorm_384x12288 ..."), SEED (1), ABLATION (none), JOBS ("$SEED:$ABLATION"; " " runs none), PRECOMPUTE_WALL (150 s), WARM_WALL (45 s),
# PART_MIB (15: archives larger than this come back in parts that --stage-in joins),
# BASELINE_GPUS (1; N: the baselines to measure dealt to N workers on GPUs 0..N-1 at once),
# PRETRAIN_STEPS (2800: ~45 s on an H200; at 700 (13 s) the 4.2M base named a ReLU GEMM's op wrong in 6 of 6 training
#   episodes' plans, teacher-forced, at 2800 in none (op_probe; docs/CODEMODEL.md, eleventh sitting); 150 steps left a
#   model that writes no valid tool call),
# PRETRAIN_ARGS ("--hidden=256 --layers=4 --heads=4 --kv_heads=2 --intermediate=704 --batch=4 --lr=2e-3 --warmup_steps=10"),
# PER_TASK (8 corpus episodes per training task), READING_PER_FAMILY (--stage: 20; N compositions a family
#   for the corpus alone, none held out, so that reading the task's ops pays (data/family MakeReadingTasks); with 20
#   the 4.2M base named the held-out plans' first op right in 20 of 24 against 14-15 without (op_probe; twelfth sitting)), LEARN_WALL (270 s: the cap on the job's own time;
#   its limit is LEARN_WALL + 90 s, room for the final evaluation: ~66 s and a quarter on an H200), WARMUP (48), RFT_EPOCHS (4),
# VALUE_STEPS (16), AGENTIC_STEPS (40), BATCH (16), ACTORS (4: N model actors and N engineer actors of N rollouts at once each, so N² at once; the ingest lets (max_policy_lag + 1) × BATCH of them run), EVAL_ROLLOUTS (4), EVAL_TEMP (1),
# SHARE_WARMUP (0; 1: the call's later jobs take its first job's warm-up set: seeds of the later stages),
# WARMUP_FROM (an earlier call's warm-up job directory, from --stage-in: every job of the call takes it; its token
#   ids are its base's tokenizer's, recorded with it: a call whose base has another tokenizer, or makes a new base, stops),
# VALUE_JOBS (in/value_jobs.tgz, from --stage-in with VALUE_FROM="A/logs.tgz ...": value pretraining on
# those earlier jobs' accepted trajectories, recipe.value_pretrain.import_job_dirs; with CONTINUE_FROM the
# carried critic pretrains on them before PPO), VALUE_BATCHES (1: critic steps a value-pretraining update,
# recipe.value_pretrain.batches_per_update; VALUE_STEPS x VALUE_BATCHES steps in all),
# LEARNER_DEVICE (cuda; cpu on one GPU, cuda:1 on two: see docs/CODEMODEL.md), LEARN_ARGS (more `kernelrl learn` flags),
# SKIP_START_EVAL (0; 1: no evaluation of the base before each job: greedy on the same base and tasks it
# repeats an earlier job's, ~40 s a job on one H200), FINAL_EVAL (1; 0: no evaluation after the job, d. above),
# PARALLEL (0; 1: the JOBS side by side, job k's sandbox worker on GPU k (SANDBOX_WORKERS_PER_JOB, 1: its
# --sandbox_workers in LEARN_ARGS), the learners on LEARNER_DEVICE: e.g. on nvidia-h200-x4 three seeds with
# LEARNER_DEVICE=cuda:3 JOBS="1:none 2:none 3:none" in one call, each with fewer PPO updates than alone),
# BASE_S (210: the corpus and pre-training's time; a base call with less left before DEADLINE after its
# baselines returns them without a base), OP_PROBE (1; 0: the base is not probed), EVAL_S (285: the least
# limit an EVAL_ONLY re-scoring starts with), CORPUS_HERE (--stage: 1 writes the corpus here as corpus.tgz, for
# the calls whose PRESETS, SEED and PER_TASK are the same; a base call then needs BASE_S 90 s).
# Calls on one machine while it stays warm (30 s after the last): each call also leaves its archives and
# baselines.jsonl in .devcarry/warm there, so the next call can name them (BASE_IN=.devcarry/warm/base.tgz,
# BASELINES_IN=.devcarry/warm/baselines.jsonl, CONTINUE_FROM=.devcarry/warm/ppo_start_policy-1-none.tgz)
# without staging here in between; a fresh machine has none, and --stage-in does as before.
set -u
C=.devcarry/ops
M=.devcarry/codemodel
# The services' binaries and libraries travel gzipped inside $M (46 MiB -> ~15): only $M is carried,
# which leaves room for a final policy and its critic to come back in (CONTINUE_FROM).
pack_ops() { tar czf "$M/ops.tgz" -C "$(dirname "$C")" "$(basename "$C")"; }

# What decides a corpus: a staged one (CORPUS_HERE) serves a call whose key is the same.
corpus_key() { echo "presets=${PRESETS:-family} seed=${SEED:-1} per_task=${PER_TASK:-8}"; }
corpus_staged() { [ -f "$M/corpus.tgz" ] && [ "$(cat "$M/corpus.key" 2>/dev/null)" = "$(corpus_key)" ]; }

# copy_job JOB DEST [STAGE]: a job's ledger.jsonl, job.textproto and the trajectories its ledger
# accepted (in STAGE only, if given) into DEST; prints how many distinct ones the ledger names.
copy_job() {
  local ids
  mkdir -p "$2/trajectories" && cp "$1/ledger.jsonl" "$1/job.textproto" "$2/"
  ids=$(grep '"kind":"ACCEPTED"' "$1/ledger.jsonl" | grep -F "${3:+\"stage\":\"$3\"}" |
        sed 's/.*"trajectory_id":"\([^"]*\)".*/\1/' | sort -u)
  for id in $ids; do cp "$1/trajectories/$(printf '%s' "$id" | xxd -p | tr -d '\n').pb" "$2/trajectories/" || true; done
  printf '%s\n' "$ids" | grep -c . || true  # The callers count what arrived.
}

# equal_reward_tasks LEDGER: the tasks whose every agentic PPO group in that job was dropped for one
# reward (dynamic sampling), one id a line: a call that goes on from the job defers them
# (ingest.deferred_task_ids), rechecking them the call after, where they are no longer named.
equal_reward_tasks() {
  awk 'function val(key) { return match($0, "\"" key "\":\"[^\"]*\"") ? substr($0, RSTART + length(key) + 4, RLENGTH - length(key) - 5) : "" }
    /"kind":"ACCEPTED"/ && /"stage":"agentic_ppo"/ { task[val("trajectory_id")] = val("task_id") }
    /"kind":"TRAINED"/ { trained[task[val("trajectory_id")]] = 1 }
    /"kind":"DROPPED"/ && /"stage":"agentic_ppo"/ && /"reason":"zero reward variance"/ { dropped[val("task_id")] = 1 }
    END { for (t in dropped) if (!(t in trained)) print t }' "$1" | LC_ALL=C sort
}

if [ "${1:-}" = "--stage-in" ]; then  # Run HERE, after --stage: an earlier call's base and baselines travel.
  set -e
  IN=${2:?usage: tools/device_codemodel.sh --stage-in DIR [--cpu] (with base.tgz and results.tgz; logs.tgz: its warm-up)}
  [ "${3:-}" = "--cpu" ] && M=.devcarry/codemodel-cpu
  # Archives over PART_MIB came back in parts (X.tgz.part0, .part1, ...): joined here, beside links to the rest.
  J=$(mktemp -d)
  for f in "$IN"/*; do
    case $f in
      *.part0) cat "${f%0}"[0-9] > "$J/$(basename "${f%.part0}")" ;;
      *.part[1-9]) ;;
      *) ln -s "$(realpath "$f")" "$J/" ;;
    esac
  done
  IN=$J
  rm -rf "$M/in" && mkdir -p "$M/in"
  # A final policy of an earlier call (final_policy-*.tgz, with its critic): CONTINUE_FROM of the next
  # call, whose PPO goes on from it; the base and the warm-up set then stay here (the carry's 64 MiB).
  # CONTINUE=ppo_start: the PPO-start policy of that call instead (another seed of its PPO stage).
  if [ -n "${CONTINUE:-}" ]; then
    KIND=final_policy; [ "$CONTINUE" = ppo_start ] && KIND=ppo_start_policy
    CONT=$(ls "$IN"/$KIND-*.tgz 2>/dev/null | head -1)
    [ -n "$CONT" ] || { echo "CONTINUE=$CONTINUE: no $KIND-*.tgz in $IN"; exit 2; }
    cp "$CONT" "$M/in/continue.tgz"
  else
    cp "$IN/base.tgz" "$M/in/"
  fi
  tar xzf "$IN/results.tgz" -C "$M/in" baselines.jsonl 2>/dev/null || echo "no baselines.jsonl in $IN/results.tgz"
  # The first job's warm-up set (its ledger, job.textproto and warm-up trajectories): WARMUP_FROM of a job call.
  if [ -f "$IN/logs.tgz" ] && [ -z "${CONTINUE:-}" ]; then
    T=$(mktemp -d) && tar xzf "$IN/logs.tgz" -C "$T"
    J=$(grep -l '"stage":"agent_warmup"' "$T"/run-*/learner-state/jobs/*/ledger.jsonl 2>/dev/null | head -1 | xargs -r dirname)
    if [ -n "$J" ]; then
      W=$M/in/warmup_job && copy_job "$J" "$W" agent_warmup > /dev/null
      # Which tokenizer wrote its token ids (run_job records it): a job call checks its base against it.
      cp "$(dirname "$(dirname "$(dirname "$J")")")/tokenizer.sha256" "$W/" 2>/dev/null || true
      echo "warm-up set of $(basename "$J"): $(ls "$W/trajectories" | wc -l) trajectories (WARMUP_FROM=$W)"
    fi
    rm -rf "$T"
  fi
  # VALUE_FROM="A/logs.tgz B/logs.tgz ...": earlier calls' jobs (ledger, job.textproto, accepted
  # trajectories), packed as in/value_jobs.tgz: VALUE_JOBS of a job call.
  if [ -n "${VALUE_FROM:-}" ]; then
    T=$(mktemp -d) V=$(mktemp -d)
    for L in $VALUE_FROM; do
      rm -rf "$T"/* && tar xzf "$L" -C "$T"
      for J in "$T"/run-*/learner-state/jobs/*; do
        [ -f "$J/ledger.jsonl" ] || continue
        D=$V/$(basename "$J") && N=$(copy_job "$J" "$D")
        # A ledger naming a trajectory that is not there would fail the job on the device: refuse it here.
        [ "$(ls "$D/trajectories" | wc -l)" = "$N" ] || { echo "VALUE_FROM: $L: $(basename "$J") lacks some of its $N accepted trajectories"; exit 2; }
      done
    done
    tar czf "$M/in/value_jobs.tgz" -C "$V" .
    echo "value pretraining's returns: $(ls "$V" | wc -l) jobs, $(find "$V" -name '*.pb' | wc -l) trajectories (VALUE_JOBS=$M/in/value_jobs.tgz)"
    rm -rf "$T" "$V"
  fi
  # A job call neither writes a corpus nor pre-trains: their binaries stay here (the carry's 64 MiB).
  rm -f "$M/bin/corpus_gen" "$M/bin/pretrain" "$M/bin/op_probe"
  pack_ops
  echo "carried: $(du -cb "$M" | tail -1 | cut -f1 | awk '{print int($1 / 1048576)}') MiB, $(cat "$M/in/baselines.jsonl" 2>/dev/null | wc -l) baselines${CONTINUE:+, continuing from $(basename "$CONT")}"
  exit 0
fi
if [ "${1:-}" = "--stage" ]; then  # Run HERE.
  set -e
  bash tools/device_ops.sh --stage
  bazel build //tools/codemodel:corpus_gen //tools/codemodel:pretrain //tools/codemodel:op_probe //tools/codemodel:design_report \
    //data/family:family_gen \
    //profiler_service:precompute_baselines
  [ "${2:-}" = "--cpu" ] && M=.devcarry/codemodel-cpu
  rm -rf "$M" && mkdir -p "$M/bin" "$M/small/heldout" "$M/tasks/family"  # (after device_ops.sh --stage)
  for b in corpus_gen pretrain op_probe design_report; do cp -L "bazel-bin/tools/codemodel/$b" "$M/bin/" && strip -s "$M/bin/$b"; done
  cp -L bazel-bin/profiler_service/precompute_baselines "$M/bin/" && strip -s "$M/bin/precompute_baselines"
  . tools/device_libs.sh
  # Their shared libraries go beside the services' in .devcarry/ops/lib (most are the same: not carried twice).
  device_stage_libs --without-torch "$C" "$M/bin/corpus_gen" "$M/bin/pretrain" "$M/bin/op_probe" "$M/bin/design_report" "$M/bin/precompute_baselines"
  G=$(mktemp -d)
  DEV=cuda; [ "${2:-}" = "--cpu" ] && DEV=cpu
  bazel-bin/data/family/family_gen --out="$G" --device=$DEV --reading_per_family=${READING_PER_FAMILY:-20} > /dev/null
  # The corpus's tasks: every training task, and READING_PER_FAMILY compositions a family for the corpus alone.
  cat "$G/train.jsonl" $([ "${READING_PER_FAMILY:-20}" -gt 0 ] && echo "$G/reading.jsonl") > "$M/all_train.jsonl"
  # The job's tasks: TRAIN_PER_FAMILY (3) training and 4 held-out tasks per family (2 by composition,
  # 2 by shape). More training tasks: RFT on 3 a family fits them (docs/CODEMODEL.md); each needs its
  # baselines, measured on the device in the call (BASELINES_IN keeps those measured before).
  for id in ${TRAIN_TASKS:-}; do  # Named training tasks instead of the first of each family.
    grep -qF "\"id\":\"$id\"" "$G/train.jsonl" || { echo "TRAIN_TASKS: no training task $id in family_gen's output"; exit 2; }
  done
  for f in ew rr ge; do
    if [ -n "${TRAIN_TASKS:-}" ]; then
      for id in $TRAIN_TASKS; do
        case $id in train/${f}_*) grep -F "\"id\":\"$id\"" "$G/train.jsonl" >> "$M/small/train.jsonl" ;; esac
      done
    else
      grep -F "\"id\":\"train/${f}_" "$G/train.jsonl" | head -"${TRAIN_PER_FAMILY:-3}" >> "$M/small/train.jsonl"
    fi
    for reason in composition shape; do
      awk -F'\t' -v f="$f" -v r="$reason" '$2 == "heldout" && $3 == r && $1 ~ ("^heldout/" f "_") {print $1}' \
        "$G/manifest.tsv" | head -2 | while read -r id; do
        cp "$G/$id.py" "$M/small/heldout/"
        grep -F "\"id\":\"$id\"" "$G/heldout.jsonl" >> "$M/small/heldout.jsonl"
        cp "$G/$id.py" "$M/tasks/family/${id#heldout/}.py"
      done
    done
  done
  for id in $(sed -n 's/.*"id":"\(train\/[^"]*\)".*/\1/p' "$M/small/train.jsonl"); do cp "$G/$id.py" "$M/tasks/family/${id#train/}.py"; done
  rm -rf "$G"
  echo "training tasks: $(wc -l < "$M/small/train.jsonl"), held-out: $(ls "$M/small/heldout"/*.py | wc -l)"
  # CORPUS_HERE=1: the corpus is written here (CPU only; 88 s on this 2-core machine, 2026-12-03) and
  # travels as corpus.tgz (~2 MiB), so that a base call spends its time on the baselines and pre-training.
  # Its key (presets, seed, episodes a task) must match the call's, or the call writes its own.
  if [ "${CORPUS_HERE:-0}" = 1 ]; then
    CFGS=(); for p in ${PRESETS:-family}; do CFGS+=(--config=configs/learn/$p.textproto); done
    CD=$(mktemp -d)
    bazel-bin/tools/codemodel/corpus_gen "${CFGS[@]}" --tasks="$M/all_train.jsonl" --out="$CD" --device=$DEV \
      --per_task=${PER_TASK:-8} --seed=${SEED:-1} --vocab_size=4096 > "$CD.log" 2>&1 || { tail -20 "$CD.log"; exit 1; }
    rm -rf "$CD/ws" && tar czf "$M/corpus.tgz" -C "$CD" . && rm -rf "$CD" "$CD.log"
    corpus_key > "$M/corpus.key"
    echo "corpus here: $(cat "$M/corpus.key"), $(( $(stat -c %s "$M/corpus.tgz") >> 10 )) KiB"
  fi
  TRACKED=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
  pack_ops
  CARRIED=$(du -cb "$M" | tail -1 | cut -f1)
  echo "the call would send $(( (TRACKED + CARRIED) >> 20 )) MiB of 64 (tracked $(( TRACKED >> 20 )), carried $(( CARRIED >> 20 )))"
  exit 0
fi

T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
# LOCAL_RUN=DIR (tools/run_local.sh on a GPU machine): everything stays in DIR, unpacked, the job's
# progress streams, and the job runs to its preset's timeout.
OUT=${LOCAL_RUN:-${OUT:-/tmp/codemodel_device_out}}; mkdir -p "$OUT"
BACKEND=${BACKEND:-cuda}
[ "$BACKEND" = cpu ] && M=.devcarry/codemodel-cpu
# Always unpacked afresh: a warm machine may keep an earlier call's binaries.
[ -f "$M/ops.tgz" ] && { rm -rf "$C" && tar xzf "$M/ops.tgz" -C "$(dirname "$C")" || exit 2; }
[ -x "$C/bin/tools/cli/kernelrl" ] && [ -x "$M/bin/design_report" ] || { echo "run tools/device_codemodel.sh --stage [--cpu] here"; exit 2; }
[ -n "${BASE_IN:-}${CONTINUE_FROM:-}" ] || [ -x "$M/bin/pretrain" ] ||
  { echo "no corpus_gen/pretrain in $M (staged for job calls by --stage-in): set BASE_IN or CONTINUE_FROM, or --stage again"; exit 2; }
PY=${PYTHON:-python3}
. "$(dirname "$0")/device_libs.sh"
device_lib_path "$C" "$C/bin/learner/learner_main" --print_config
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
SEED=${SEED:-1}
RUN=${LOCAL_RUN:-/tmp/kernelrl-codemodel} BASE=${LOCAL_RUN:-/tmp/kr}/baselines
[ -n "${LOCAL_RUN:-}" ] || rm -rf "$RUN" "$BASE"
mkdir -p "$RUN" "$BASE"
DEV=$([ "$BACKEND" = cuda ] && echo cuda || echo cpu)

# 1. The corpus and tokenizer on the CPU (on the CUDA backend after the baselines, see 2).
PRESETS=${PRESETS:-family}
# The presets as files of the carried tree, not --preset: that reads the staged kernelrl's own
# runfiles, which keep the presets of the last --stage (a preset edited since would not run).
PRESET_CONFIGS=()
for p in $PRESETS; do PRESET_CONFIGS+=(--config=configs/learn/$p.textproto); done
# 2. Pre-training on the GPU, once the corpus is written (its base model comes back as base.tgz: BASE_IN of
#    a later call), on the learner's GPU (LEARNER_DEVICE=cuda:N) or GPU 0. On the CUDA backend both run
#    after the baselines, so that no CPU load of ours sits beside a baseline's host-timed figures.
#    (Measured alone, torch.compile's ~57 us GEMM still read 148 us eager-timed: its own per-call
#    host cost, which the judge's graph-replayed comparison leaves out; docs/CODEMODEL.md, tenth sitting.)
make_corpus() {
  if corpus_staged; then
    mkdir -p "$RUN/corpus" && tar xzf "$M/corpus.tgz" -C "$RUN/corpus" || return 1
    echo "corpus staged here ($(corpus_key)) at $(elapsed) s: $(tr -d '\n ' < "$RUN/corpus/stats.json" | cut -c1-400)"
    return 0
  fi
  [ -f "$M/corpus.tgz" ] && echo "the staged corpus ($(cat "$M/corpus.key")) is not this call's ($(corpus_key)): writing one"
  "$M/bin/corpus_gen" "${PRESET_CONFIGS[@]}" --tasks="$M/all_train.jsonl" --out="$RUN/corpus" \
    --device=$DEV --per_task=${PER_TASK:-8} --seed=$SEED --vocab_size=4096 > "$OUT/corpus.log" 2>&1 ||
    { tail -20 "$OUT/corpus.log"; return 1; }
  echo "corpus at $(elapsed) s: $(tr -d '\n ' < "$RUN/corpus/stats.json" | cut -c1-400)"
}
pretrain_base() {
  "$M/bin/pretrain" --corpus_dir="$RUN/corpus" --out="$RUN/base" --device=$DEV --steps=${PRETRAIN_STEPS:-2800} \
    --seed=$SEED ${PRETRAIN_ARGS:---hidden=256 --layers=4 --heads=4 --kv_heads=2 --intermediate=704 --batch=4 --lr=2e-3 --warmup_steps=10} \
    > "$OUT/pretrain.json" 2> "$OUT/pretrain.log" || { tail -20 "$OUT/pretrain.log"; return 1; }
  echo "pretrained at $(elapsed) s: $(cat "$OUT/pretrain.json")"
  # How the base reads its tasks' ops, teacher-forced, on the job's training and held-out tasks
  # (tools/codemodel/op_probe.h; the episodes stay in memory). OP_PROBE=0 leaves it out: the base
  # is packed first either way, so a call cut by the device's limit still returns it.
  [ -n "${LOCAL_RUN:-}" ] || tar czf "$OUT/base.tgz" -C "$RUN/base" .
  [ "${OP_PROBE:-1}" = 0 ] && return 0
  # Its time on the H200 was not measured alone; on the CPU it took 54 s (eleventh sitting).
  [ $(( $(elapsed) + 60 )) -gt "${DEADLINE:-560}" ] && { echo "op probe left out: $(elapsed) s gone of the DEADLINE's ${DEADLINE:-560}"; return 0; }
  "$M/bin/op_probe" "${PRESET_CONFIGS[@]}" --checkpoint="$RUN/base" --device=$DEV --kernel_device=$DEV --per_task=2 \
    --tasks="$M/small/train.jsonl,$M/small/heldout.jsonl" > "$OUT/op_probe.json" 2> "$OUT/op_probe.log" ||
    { tail -20 "$OUT/op_probe.log"; return 1; }
  echo "op probe at $(elapsed) s (right/total):"; grep '^op probe ' "$OUT/op_probe.log"
}
CORPUS="" BUILD_BASE=0
LEARNER_GPU=$(echo "${LEARNER_DEVICE:-}" | sed -n 's/^cuda:\([0-9]\+\)$/\1/p')
[ "${BASELINE_GPUS:-1}" -gt 1 ] && [ "$BACKEND" = cuda ] && [ "$BASELINE_GPUS" -gt "$(nvidia-smi -L | wc -l)" ] &&
  { echo "BASELINE_GPUS=$BASELINE_GPUS: this machine has $(nvidia-smi -L | wc -l) GPUs"; exit 2; }
if [ -n "${CONTINUE_FROM:-}" ]; then  # An earlier job's final policy and critic: its PPO goes on.
  mkdir -p "$RUN/continue" && tar xzf "$CONTINUE_FROM" -C "$RUN/continue"
  CONT_DIR=$(ls -d "$RUN"/continue/*_policy-* | head -1)
  mkdir -p "$RUN/base" && cp -r "$CONT_DIR"/. "$RUN/base/"
  echo "continuing from $(basename "$CONT_DIR"): $(head -1 "$RUN/base/SHA256SUMS")"
elif [ -n "${BASE_IN:-}" ]; then  # An earlier call's base model (base.tgz): no corpus, no pre-training.
  mkdir -p "$RUN/base" && tar xzf "$BASE_IN" -C "$RUN/base"
elif [ "$BACKEND" = cuda ]; then
  BUILD_BASE=1  # after the baselines, below
else
  make_corpus &
  CORPUS=$!
fi
# A warm-up set's token ids are its base's tokenizer's: a base made in this call (a new corpus trains a
# new tokenizer) cannot take one, nor a base whose tokenizer is not the one recorded with the set.
if [ -n "${WARMUP_FROM:-}" ]; then
  [ -n "${BASE_IN:-}${CONTINUE_FROM:-}" ] ||
    { echo "WARMUP_FROM with a base made in this call: its new tokenizer cannot read the set's token ids (set BASE_IN, or let the job collect its warm-up)"; exit 2; }
  if [ -f "$WARMUP_FROM/tokenizer.sha256" ] &&
     [ "$(sha256sum < "$RUN/base/tokenizer.json" | cut -d' ' -f1)" != "$(cat "$WARMUP_FROM/tokenizer.sha256")" ]; then
    echo "WARMUP_FROM=$WARMUP_FROM was written with another tokenizer than the base's ($RUN/base/tokenizer.json)"; exit 2
  fi
fi
GPU_FLAGS=()
if [ "$BACKEND" = cuda ]; then
  KPROF=$(device_build_kprof "$OUT/kprof_build.log") || KPROF=""
  GPU_FLAGS=(--set=sandbox.enable_profiling=true --set=sandbox.baseline_dir=$BASE ${KPROF:+--set=sandbox.kprof_lib=$KPROF}
             --set=sandbox.profiler_root=$PWD --set=sandbox.profiler.time_budget_s=0.2)
  export TORCHINDUCTOR_CACHE_DIR=/tmp/kr_inductor
  WW=${WARM_WALL:-45}
  [ -n "${BASELINES_IN:-}" ] && WW=0  # torch.compile's cache only serves the baselines' measurement
  [ "$WW" = 0 ] || PYTHONPATH=$PWD TORCHINDUCTOR_COMPILE_THREADS=2 timeout "$WW" $PY -m profiler_service.harness.precompute \
    --tasks_root "$M/tasks" --levels family --out "$OUT/compile_warm.jsonl" --workers 8 --warm_only \
    --deadline_s $(( WW - 8 )) > "$OUT/compile_warm.log" 2>&1
  R=$PWD/$C/bin/sandbox/sandbox_main.runfiles/kernelrl
  # BASELINES_IN: an earlier call's measurements (baselines.jsonl, same GPU model); only the rest are measured.
  IDS=$(for f in "$M"/tasks/family/*.py; do echo "family/$(basename "$f" .py)"; done)  # one a line
  if [ -n "${BASELINES_IN:-}" ]; then
    cp "$BASELINES_IN" "$OUT/baselines.jsonl"
    IDS=$(for id in $IDS; do grep -qF "\"$id\"" "$BASELINES_IN" || echo "$id"; done)
    LIST=$(echo $IDS | tr ' ' ,)
    echo "baselines: $(wc -l < "$BASELINES_IN") from $BASELINES_IN; measuring ${LIST:-none}"
  fi
  # BASELINE_GPUS=N: the tasks dealt round-robin to N workers, worker g timing on GPU g, all at once.
  measure_shard() {  # GPU, --only=...
    timeout -k 10 "${PRECOMPUTE_WALL:-150}" "$C/bin/sandbox/measure_baselines" --set=backend=cuda --set=python=$PY \
      --set=harness_dir=$PWD/sandbox/harness --set=contain_lib=$R/sandbox/contain/libkernelrl_contain.so \
      --set=verify_cuda_lib=$R/sandbox/harness/cuda/libkernelrl_verify_cuda.so --set=enable_profiling=true \
      ${KPROF:+--set=kprof_lib=$KPROF} --set=profiler_root=$PWD --set=work_root=/tmp/kr_baseline_work$1 \
      --set=gpu_index=$1 --set=verify.wall_seconds=120 --set=profiler.time_budget_s=0.3 \
      --tasks_root="$M/tasks" --levels=family "$2" --out="$OUT/baselines.new$1.jsonl" > "$OUT/precompute$1.log" 2>&1
  }
  RC=0
  if [ -n "$IDS" ]; then
    PIDS=()
    for g in $(seq 0 $((${BASELINE_GPUS:-1} - 1))); do
      SHARD=$(echo "$IDS" | awk -v n="${BASELINE_GPUS:-1}" -v g="$g" 'NR % n == g' | paste -sd,)
      [ -n "$SHARD" ] && { measure_shard "$g" "--only=$SHARD" & PIDS+=($!); }
    done
    for p in "${PIDS[@]}"; do wait "$p" || RC=$?; done
  fi
  cat "$OUT"/baselines.new*.jsonl >> "$OUT/baselines.jsonl" 2>/dev/null; rm -f "$OUT"/baselines.new*.jsonl
  echo "measure_baselines rc=$RC at $(elapsed) s: $(wc -l < "$OUT/baselines.jsonl" 2>/dev/null || echo 0)/$(ls "$M/tasks/family" | wc -l) tasks"
  # The worker's own logs (a zygote that did not start says why only there).
  find /tmp/kr_baseline_work* -maxdepth 3 -name '*.log' -size -2M -exec cp --backup=numbered {} "$OUT/" \; 2>/dev/null
  "$M/bin/precompute_baselines" --measurements="$OUT/baselines.jsonl" --set=baseline_cache_dir=$BASE \
    --table="$OUT/baselines.tsv" > "$OUT/import.log" 2>&1 || echo "baseline import failed (import.log): rewards stay at 1 (baseline_missing)"
  # Baselines of an older protocol (BASELINES_IN from before the profiler changed how it measures) are
  # read as missing: every verdict of a job would pay 1. Stop before a job spends the call on them.
  PROTO=$(sed -n 's/.*through the executor path under protocol \([0-9]*\).*/\1/p' "$OUT/import.log")
  STALE=$(awk -F'\t' -v p="executor/$PROTO" 'NR > 1 && $10 != p' "$OUT/baselines.tsv" 2>/dev/null | wc -l)
  if [ -n "$PROTO" ] && [ "$STALE" -gt 0 ] && [ -n "$(echo ${JOBS:-$SEED:${ABLATION:-none}})" ]; then
    echo "$STALE baselines are not timed under protocol $PROTO (baselines.tsv's timing_path): measure them again (without BASELINES_IN)"
    exit 2
  fi
fi

# The corpus and pre-training need BASE_S (210 s: corpus 119 s, pre-training 75 s with loading, the H200
# of 2026-12-02) before the DEADLINE: a call whose baselines left less returns them without a base (and
# runs no job) rather than be killed by the device's limit with nothing packed.
# A corpus staged here (CORPUS_HERE) leaves pre-training alone: 90 s.
corpus_staged && : "${BASE_S:=90}"
if [ "$BUILD_BASE" = 1 ] && [ $(( $(elapsed) + ${BASE_S:-210} )) -gt "${DEADLINE:-560}" ]; then
  echo "no base: $(elapsed) s gone, the corpus and pre-training need ${BASE_S:-210} s of the DEADLINE's ${DEADLINE:-560};" \
    "the baselines come back in results.tgz: a next call with BASELINES_IN builds the base"
  BUILD_BASE=0 JOBS=" "
fi
if [ "$BUILD_BASE" = 1 ]; then
  ( [ -n "$LEARNER_GPU" ] && export CUDA_VISIBLE_DEVICES=$LEARNER_GPU; make_corpus && pretrain_base ) || exit 1
elif [ -n "$CORPUS" ]; then { wait $CORPUS && pretrain_base; } || exit 1
fi

# 3-4. The recipe's jobs on the same base, one after the other (JOBS: SEED:ABLATION pairs); per job its
# curves, report, design report and designs.png in $OUT/<seed>-<ablation>/, its final policy with the
# tokenizer as final_policy-<seed>-<ablation>.tgz. Few files come back (at most 8): the per-job
# directories and the shared logs go into results.tgz, every job's run (trajectories included,
# checkpoints not) into logs.tgz.
# The recipe's sizes come from the presets; a knob that is set overrides its field.
JOB_FLAGS=()
[ "$PRESETS" = family ] && { : "${ACTORS:=4}" "${EVAL_ROLLOUTS:=4}" "${EVAL_TEMP:=1}"; }
for kv in agent_warmup.steps:WARMUP rft.epochs:RFT_EPOCHS value_pretrain.steps:VALUE_STEPS agentic_ppo.steps:AGENTIC_STEPS; do
  v=${kv#*:}; [ -n "${!v:-}" ] && JOB_FLAGS+=(--job_set=recipe.${kv%%:*}=${!v})
done
[ -n "${BATCH:-}" ] && JOB_FLAGS+=(--job_set=batch.trajectories_per_step=$BATCH)
# A job that evaluates its PPO start keeps every checkpoint (~0.1 GB each for the ~4M model and its
# critic), so that the PPO-start policy is still there at its end: ppo_start_policy-<seed>-<ablation>.tgz.
[ -z "${CONTINUE_FROM:-}" ] && JOB_FLAGS+=(--job_set=checkpoint.keep_last=100000)
[ -n "${ACTORS:-}" ] && JOB_FLAGS+=(--actors=$ACTORS --random_actors=$ACTORS --concurrent_rollouts=$ACTORS)
[ -n "${EVAL_ROLLOUTS:-}" ] && JOB_FLAGS+=(--eval_rollouts=$EVAL_ROLLOUTS)
[ -n "${EVAL_TEMP:-}" ] && JOB_FLAGS+=(--eval_temperature=$EVAL_TEMP)
[ "${SKIP_START_EVAL:-0}" = 1 ] && JOB_FLAGS+=(--skip_start_eval)
# FINAL_EVAL=0: no evaluation after the job, its time PPO's: a call that a later call continues
# (CONTINUE_FROM), which evaluates the policy then; a chain's last call keeps its final evaluation.
[ "${FINAL_EVAL:-1}" = 0 ] && JOB_FLAGS+=(--skip_final_eval)
# CONTINUE_FROM: agentic PPO from the earlier job's policy and critic (their AdamW moments restart). An
# archive without a critic (packed before critics travelled) gets one from the policy's trunk, value
# pretraining on fresh rollouts first (VALUE_STEPS).
if [ "${EVAL_ONLY:-0}" = 1 ]; then
  [ -n "${CONTINUE_FROM:-}" ] || { echo "EVAL_ONLY=1 re-scores a policy archive: set CONTINUE_FROM"; exit 2; }
  JOB_FLAGS+=(--eval_only)
  echo "eval only: $(basename "$CONT_DIR") on the held-out tasks, ${EVAL_ROLLOUTS:-(the presets)} rollouts a task at temperature ${EVAL_TEMP:-(the presets)}"
elif [ -n "${CONTINUE_FROM:-}" ]; then
  # No evaluation before PPO: the start one and the PPO-start one would both score the earlier call's
  # final policy again (98 s of an H200 call, eighteenth sitting); the chain's start is its first
  # call's PPO start (`kernelrl seeds A+B`). The cut holds the earlier call's longest evaluation for
  # the final one. The job's stages begin their task cycles again: the order is reseeded by the
  # chain's call, so that a call cut after a few updates does not lease the same tasks first again.
  CALLS=$(cat "$RUN/base/job_calls" 2>/dev/null || echo 1)
  EXPECTED=$(cat "$RUN/base/eval_seconds" 2>/dev/null); [ -n "$EXPECTED" ] || EXPECTED=0
  JOB_FLAGS+=(--job_set=recipe.single_turn_ppo.skip=true --job_set=recipe.agent_warmup.skip=true --job_set=recipe.rft.skip=true --skip_start_eval
    --skip_ppo_start_eval --expected_eval_s="$EXPECTED" --job_set=ingest.task_order_seed=$(( SEED * 1000 + CALLS )))
  echo "call $((CALLS + 1)) of this seed's chain: no evaluation before PPO, ${EXPECTED} s held for the final one"
  # The tasks whose every group in the earlier call had one reward go last in each task cycle (of this
  # call's task set only), so that a call cut after a dozen groups spends them where outcomes differ.
  DEFERRED=()
  while read -r T; do
    grep -qF "\"id\":\"$T\"" "$M/small/train.jsonl" && DEFERRED+=("$T") && JOB_FLAGS+=(--job_set=ingest.deferred_task_ids=$T)
  done < <(cat "$RUN/base/deferred_tasks" 2>/dev/null)
  echo "deferred to the end of each task cycle (one reward in every group of the earlier call): ${#DEFERRED[@]}${DEFERRED:+: ${DEFERRED[*]}}"
  if [ -f "$RUN/base/critic/config.json" ]; then
    # With VALUE_JOBS the carried critic pretrains further on those jobs' returns first.
    JOB_FLAGS+=(--critic_checkpoint="$RUN/base/critic")
    [ -n "${VALUE_JOBS:-}" ] || JOB_FLAGS+=(--job_set=recipe.value_pretrain.skip=true)
  else
    echo "no critic/ in $CONTINUE_FROM: the critic starts from the policy's trunk and pretrains on fresh rollouts"
    JOB_FLAGS+=(--job_set=recipe.value_pretrain.use_warmup_trajectories=false)
  fi
fi
# VALUE_JOBS=in/value_jobs.tgz (from --stage-in with VALUE_FROM): value pretraining on those jobs' returns.
if [ -n "${VALUE_JOBS:-}" ]; then
  mkdir -p "$RUN/value_jobs" && tar xzf "$VALUE_JOBS" -C "$RUN/value_jobs"
  JOB_FLAGS+=(--job_set=recipe.value_pretrain.use_warmup_trajectories=false)
  for V in "$RUN"/value_jobs/*/; do JOB_FLAGS+=(--job_set=recipe.value_pretrain.import_job_dirs=${V%/}); done
  JOB_FLAGS+=(--job_set=recipe.value_pretrain.batches_per_update=${VALUE_BATCHES:-1})
  echo "value pretraining on $(ls "$RUN/value_jobs" | wc -l) earlier jobs' returns"
fi
# SHARE_WARMUP=1: the later jobs of the call take the first job's warm-up set; WARMUP_FROM=DIR (an
# earlier call's, placed by --stage-in): every job takes that one.
WARM_JOB=""
if [ -n "${WARMUP_FROM:-}" ]; then
  [ -f "$WARMUP_FROM/ledger.jsonl" ] || { echo "WARMUP_FROM=$WARMUP_FROM: no ledger.jsonl there"; exit 2; }
  WARM_JOB=$(cd "$WARMUP_FROM" && pwd)
fi
# run_job NAME SEED ABLATION [FIRST_GPU]: one `kernelrl learn`, its sandbox workers from GPU FIRST_GPU on.
run_job() {
  local NAME=$1 S=$2 A=$3 WALL HARD
  local SHARE=(); [ -n "$WARM_JOB" ] && SHARE=(--job_set=recipe.agent_warmup.import_job_dir=$WARM_JOB)
  # The job's last resort, 30 s before the DEADLINE: a final evaluation that runs long (jobs side by side
  # share a GPU) loses that job's end, not the call's packed results. Its limit (--job_timeout_s) covers
  # its final evaluation, which kernelrl learn cuts PPO early enough for: 15 s before the kill (stopping
  # the services, writing the curves), and at most LEARN_WALL + 90 s (the job's own time and room for its
  # final evaluation), the kill then a minute after it.
  HARD=$(( ${DEADLINE:-560} - $(elapsed) - 30 ))
  WALL=$(( HARD - 15 )); [ $WALL -gt $(( ${LEARN_WALL:-270} + 90 )) ] && WALL=$(( ${LEARN_WALL:-270} + 90 ))
  [ $HARD -gt $(( WALL + 60 )) ] && HARD=$(( WALL + 60 ))
  # A re-scoring cut at its limit scores only the tasks it finished (kernelrl learn exits 3, its
  # curves.json records the cut) and kernelrl seeds --rescored refuses it: refuse a limit shorter than
  # it needs (EVAL_S, 285 s: 12 tasks x 4 rollouts, 16 at once, took 259-277 s on an H200, 2026-12-02).
  if [ "${EVAL_ONLY:-0}" = 1 ] && [ -z "${LOCAL_RUN:-}" ] && [ $WALL -lt "${EVAL_S:-285}" ]; then
    echo "job $NAME not started: its limit would be $WALL s, the re-scoring needs ${EVAL_S:-285} s (EVAL_S): raise DEADLINE or LEARN_WALL"
    exit 2
  fi
  # The stall limit is over the family preset's lease (300 s): no line changes while a batch's rollouts
  # are in flight, and 24 eight-turn rollouts that rewrite their kernels returned none in 120 s (H200).
  local CUT=(timeout $HARD) CUT_FLAGS=(--job_timeout_s=$WALL --stall_timeout_s=320)
  [ -n "${LOCAL_RUN:-}" ] && CUT=() CUT_FLAGS=()
  mkdir -p "$RUN/run-$NAME" && sha256sum < "$RUN/base/tokenizer.json" | cut -d' ' -f1 > "$RUN/run-$NAME/tokenizer.sha256"
  echo "job $NAME at $(elapsed) s${CUT_FLAGS:+, limit $WALL s (the final evaluation included), killed after $HARD s}${4:+, sandbox from GPU $4}"
  local ABL=(); [ "$A" = none ] || ABL=(--ablation=$A)
  "${CUT[@]}" "$C/bin/tools/cli/kernelrl" learn "${PRESET_CONFIGS[@]}" --bin_dir="$C/bin" \
    --base_checkpoint="$RUN/base" --family_dir="$M/small" --backend=$BACKEND --learner_device=${LEARNER_DEVICE:-$DEV} \
    --run_dir="$RUN/run-$NAME" --eval_every=1000 --plot_script="$PWD/tools/cli/learn_plots.py" "${ABL[@]}" \
    "${GPU_FLAGS[@]}" "${JOB_FLAGS[@]}" "${SHARE[@]}" --job_set=seed=$S "${CUT_FLAGS[@]}" ${4:+--sandbox_first_gpu=$4} \
    ${LEARN_ARGS:-} 2>&1 |
    if [ -n "${LOCAL_RUN:-}" ]; then tee "$OUT/learn-$NAME.log"; else cat > "$OUT/learn-$NAME.log"; fi
}
# finish_job NAME: its curves, report, design report and final policy.
finish_job() {
  local NAME=$1 JOB D LATEST F
  [ -n "${LOCAL_RUN:-}" ] || tail -40 "$OUT/learn-$NAME.log"
  JOB=$(ls -d "$RUN/run-$NAME"/learner-state/jobs/* 2>/dev/null | head -1)
  [ -n "$JOB" ] || return 0
  [ "${SHARE_WARMUP:-0}" = 1 ] && [ -z "$WARM_JOB" ] && grep -q '"stage":"agent_warmup"' "$JOB/ledger.jsonl" && WARM_JOB=$JOB
  D=$OUT/$NAME; mkdir -p "$D"
  cp "$JOB"/curves/curves.json "$JOB"/curves/*.png "$JOB"/curves/report.txt "$D/" 2>/dev/null
  # With the base's corpus shapes: the tool lines its corpus never showed the model, per tool.
  local SHAPES=(); [ -f "$RUN/base/tool_line_shapes.txt" ] && SHAPES=(--corpus_shapes="$RUN/base/tool_line_shapes.txt")
  if [ -d "$JOB/trajectories" ]; then  # None in a re-scoring (EVAL_ONLY): no job trained.
    "$M/bin/design_report" --trajectories="$JOB/trajectories" --tasks="$M/small/train.jsonl,$M/small/heldout.jsonl" \
      --bucket=10 "${SHAPES[@]}" > "$D/design_report.json" 2> "$D/design_report.log"
    grep -E '^(tool lines|revisions:)' "$D/design_report.log" || true
    $PY tools/codemodel/design_plot.py "$D/design_report.json" "$D/designs.png" || echo "designs.png not drawn"
  fi
  # The held-out evaluations' rollouts (kernelrl eval keeps each one's Trajectory): whether each
  # rollout's first and final kernels have their task's op lines, the held-out compositions' above all.
  local E L
  for E in "$JOB"/curves/eval-*/trajectories; do
    [ -d "$E" ] || continue
    L=$(basename "$(dirname "$E")")
    "$M/bin/design_report" --trajectories="$E" --tasks="$M/small/train.jsonl,$M/small/heldout.jsonl" --per_trajectory \
      > "$D/design_report-$L.json" 2> /dev/null || { echo "$L: design_report failed"; continue; }
    $PY -c 'import json, sys
rows = [t for t in json.load(open(sys.argv[1]))["per_trajectory"] if t["op_lines"]]
first = sum(t["first_op_lines"] == "right" for t in rows)
wrong = ["%s (first %s, %s, reward %g)" % (t["task_id"].split("/")[-1], t["first_op_lines"], t["design"], t["reward"])
         for t in rows if "wrong" in (t["op_lines"], t["first_op_lines"])]
print("%s: op lines right in %d of %d first kernels, %d of %d final%s" % (sys.argv[2], first, len(rows),
      sum(t["op_lines"] == "right" for t in rows), len(rows), "; wrong: " + ", ".join(wrong) if wrong else ""))' \
      "$D/design_report-$L.json" "$L" || true
  done
  LATEST=$(cat "$JOB/checkpoints/LATEST" 2>/dev/null)
  [ -n "$LATEST" ] || return 0
  equal_reward_tasks "$JOB/ledger.jsonl" > "$RUN/deferred-$NAME"
  pack_policy final_policy "$NAME" "$JOB/checkpoints/$LATEST" $(( $(cat "$RUN/base/job_calls" 2>/dev/null || echo 0) + 1 )) \
    "$JOB/curves/curves.json" "$RUN/deferred-$NAME"
  # The policy the PPO-start evaluation scored (the RFT policy and its pretrained critic): other seeds
  # of the PPO stage start from it (CONTINUE=ppo_start --stage-in), with no warm-up, RFT, value
  # pretraining or evaluation before PPO of their own, and read against this call's PPO start.
  local V
  V=$($PY -c 'import json, sys
for e in json.load(open(sys.argv[1])).get("heldout", []):
    if str(e.get("label", "")).startswith("agentic-"):
        print(int(e["policy_version"])); break' "$JOB/curves/curves.json" 2>/dev/null)
  if [ -n "$V" ] && [ -d "$JOB/checkpoints/step-$(printf %08d "$V")/policy" ]; then
    pack_policy ppo_start_policy "$NAME" "$JOB/checkpoints/step-$(printf %08d "$V")" 0 "$JOB/curves/curves.json"
  elif [ -n "$V" ]; then
    echo "no checkpoint of the PPO-start policy v$V left in $JOB/checkpoints"
  fi
}
# pack_policy KIND NAME CHECKPOINT CALLS CURVES: CHECKPOINT's policy with its critic and the tokenizer as
# $OUT/KIND-NAME.tgz (CONTINUE_FROM of a later call), CALLS the job calls of its chain so far, CURVES
# the job's curves.json (its evaluations' times).
pack_policy() {
  local KIND=$1 NAME=$2 CK=$3 CALLS=$4 CURVES=$5 DEFERRED=${6:-} F
  F=$RUN/$KIND-$NAME; rm -rf "$F"; cp -r "$CK/policy" "$F"; cp "$RUN/base/tokenizer.json" "$F/"
  # Its corpus's tool-line shapes too: a call that continues from it (CONTINUE_FROM) reports against them.
  [ -f "$RUN/base/tool_line_shapes.txt" ] && cp "$RUN/base/tool_line_shapes.txt" "$F/"
  # Its critic beside it (critic/, value head included): CONTINUE_FROM of a later call.
  [ -d "$CK/critic" ] && cp -r "$CK/critic" "$F/critic"
  # For a call that goes on from it: the job calls in its chain so far and its longest held-out evaluation.
  echo "$CALLS" > "$F/job_calls"
  [ -n "$DEFERRED" ] && cp "$DEFERRED" "$F/deferred_tasks"
  grep -o '"eval_seconds": *[0-9.]*' "$CURVES" 2>/dev/null | sed 's/.*: *//' | sort -g | tail -1 > "$F/eval_seconds"
  [ -s "$F/eval_seconds" ] || cp "$RUN/base/eval_seconds" "$F/" 2>/dev/null || true  # None here: the chain's last.
  (cd "$F" && sha256sum model*.safetensors tokenizer.json $(ls critic/*.safetensors 2>/dev/null) > SHA256SUMS)
  [ -n "${LOCAL_RUN:-}" ] && { echo "$KIND $NAME ($(basename "$CK")): $F; $(head -1 "$F/SHA256SUMS")"; return 0; }
  tar czf "$OUT/$KIND-$NAME.tgz" -C "$RUN" "$KIND-$NAME"
  echo "$KIND $NAME ($(basename "$CK")): $(head -1 "$F/SHA256SUMS"); archive sha256 $(sha256sum "$OUT/$KIND-$NAME.tgz" | cut -d' ' -f1)"
}
if [ "${PARALLEL:-0}" = 1 ]; then
  # The jobs side by side, job k's sandbox worker(s) from GPU k × SANDBOX_WORKERS_PER_JOB on (the learners
  # on LEARNER_DEVICE, a GPU none of them times on): seeds in one call, each with fewer PPO updates than
  # alone (docs/CODEMODEL.md, ninth sitting: its verdicts queued 3-5x longer).
  [ "${SHARE_WARMUP:-0}" = 1 ] && { echo "PARALLEL=1 with SHARE_WARMUP=1: the jobs start together (use WARMUP_FROM)"; exit 2; }
  K=0 PIDS=()
  for J in ${JOBS:-$SEED:${ABLATION:-none}}; do
    run_job "${J/:/-}" "${J%%:*}" "${J#*:}" $(( K * ${SANDBOX_WORKERS_PER_JOB:-1} )) & PIDS+=($!)
    K=$((K + 1))
  done
  for p in "${PIDS[@]}"; do wait "$p"; done
  for J in ${JOBS:-$SEED:${ABLATION:-none}}; do finish_job "${J/:/-}"; done
else
  for J in ${JOBS:-$SEED:${ABLATION:-none}}; do
    run_job "${J/:/-}" "${J%%:*}" "${J#*:}"; finish_job "${J/:/-}"
  done
fi
# The call's jobs read together (docs/CODEMODEL.md "Seeds read together"); across calls, run
# `kernelrl seeds` here on the unpacked results.
CURVES=$(ls "$OUT"/*/curves.json 2>/dev/null)
if [ "${EVAL_ONLY:-0}" = 1 ]; then
  echo "re-scoring: here, kernelrl seeds CHAIN... --rescored=<this and the others>/curves.json"
elif [ -n "${CONTINUE_FROM:-}" ] || [ "${FINAL_EVAL:-1}" = 0 ]; then  # Its PPO start, or its final, is another call's.
  echo "seeds: this call is one of a chain; here, kernelrl seeds FIRST/curves.json+...+LAST/curves.json"
elif [ -n "$CURVES" ]; then
  "$C/bin/tools/cli/kernelrl" seeds $CURVES > "$OUT/seeds.txt" 2>&1; cat "$OUT/seeds.txt"
fi
[ -n "${LOCAL_RUN:-}" ] && { echo "done at $(elapsed) s; everything is in $RUN"; exit 0; }
[ -n "$(ls -d "$RUN"/run-* 2>/dev/null)" ] &&
  tar czf "$OUT/logs.tgz" -C "$RUN" --exclude='*-ws' --exclude='checkpoints' $(cd "$RUN" && ls -d run-*)
rm -f "$OUT"/compile_warm.*
# What a next call on this machine, while it stays warm, takes without staging (its BASE_IN,
# BASELINES_IN, CONTINUE_FROM): .devcarry/warm is not carried, so the device's copy keeps it between calls.
mkdir -p .devcarry/warm && cp "$OUT"/*.tgz "$OUT"/baselines.jsonl .devcarry/warm/ 2>/dev/null
echo "kept on this machine: $(cd .devcarry/warm && ls | tr '\n' ' ')"
# baselines.jsonl travels in results.tgz: the next call's BASELINES_IN.
R=$(cd "$OUT" && ls -d *.json *.jsonl *.txt *.tsv *.log */ 2>/dev/null)
[ -n "$R" ] && (cd "$OUT" && tar czf results.tgz $R && rm -rf $R)
# A file over 16 MiB does not come back from the device (a base or policy past ~5M parameters, with
# its critic): archives over PART_MIB (15) travel in parts, which --stage-in joins.
for f in "$OUT"/*.tgz; do
  [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt $(( ${PART_MIB:-15} << 20 )) ] &&
    split -b "${PART_MIB:-15}m" -d -a 1 "$f" "$f.part" && rm "$f"
done
echo "done at $(elapsed) s; $(ls "$OUT")"
