#!/usr/bin/env bash
# The critic on a run's own trajectories, on the GPU (critic_replay_bench --device=cuda, bf16), with and
# without the engineer's corpus as its value set (tools/codemodel/value_set.h): does value pretraining on
# the corpus's returns predict what the policy's rollouts are paid? docs/CODEMODEL.md says what it found.
#
#   here:   bazel build //learner/rl:critic_replay_bench //tools/codemodel:corpus_value_set
#           tools/device_critic.sh --stage CORPUS_DIR BASE_DIR JOB_DIR...
#             CORPUS_DIR: corpus_gen's output (corpus.jsonl, tokenizer.json) of the base's corpus
#             BASE_DIR: the base checkpoint the jobs started from; JOB_DIR: finished jobs
#             (learner-state/jobs/<id>: job.textproto, ledger.jsonl, trajectories/)
#   device: tools/device_critic.sh      # run tool, carry [".devcarry/critic"]
#
# On the device: the value sets (the episodes alone; the episodes and each Profile's prefix), then per
# set the critic trained on it and measured on every trajectory of the jobs (none trained on), and,
# as baselines, the critic trained on a random three quarters of the jobs' own trajectories and
# measured on the rest (own), and trained on every job but the last and measured on the last's
# (next-job: value pretraining on earlier jobs judged on a new seed's rollouts). Knobs: RUNS (own
# next-job corpus-episodes corpus-prefixes), STEPS (128), EVERY (16), LRS (the job's), HELDOUT (96),
# DEVICE (cuda; cpu to rehearse).
# Results: $OUT/<run>.jsonl (critic_replay_bench's lines), $OUT/summary.txt.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
C=$ROOT/.devcarry/critic

if [ "${1:-}" = "--stage" ]; then
  set -e
  shift
  [ $# -ge 3 ] || { echo "usage: $0 --stage CORPUS_DIR BASE_DIR JOB_DIR..."; exit 2; }
  corpus=$1 base=$2; shift 2
  rm -rf "$C" && mkdir -p "$C/bin" "$C/lib" "$C/libcxx" "$C/corpus" "$C/base"
  cp "$ROOT/bazel-bin/learner/rl/critic_replay_bench" "$ROOT/bazel-bin/tools/codemodel/corpus_value_set" "$C/bin/"
  strip -s "$C/bin/"*
  . "$ROOT/tools/device_libs.sh"
  device_stage_libs --without-torch --libcxx "$C" "$C/bin/critic_replay_bench" "$C/bin/corpus_value_set"
  gzip -c "$corpus/corpus.jsonl" > "$C/corpus/corpus.jsonl.gz"
  cp "$corpus/tokenizer.json" "$C/corpus/"
  cp "$base"/config.json "$base"/model*.safetensors "$base"/tokenizer.json "$C/base/"
  cmp -s "$corpus/tokenizer.json" "$base/tokenizer.json" || { echo "the corpus's tokenizer is not the base's"; exit 2; }
  J=$(mktemp -d) i=0
  for j in "$@"; do
    i=$((i + 1)); mkdir -p "$J/$i"
    cp "$j/job.textproto" "$j/ledger.jsonl" "$J/$i/" && cp -r "$j/trajectories" "$J/$i/"
  done
  tar czf "$C/jobs.tgz" -C "$J" . && rm -rf "$J"
  du -sh "$C"
  exit 0
fi

OUT=${OUT:-/tmp/critic_out}; mkdir -p "$OUT"
S=$OUT/summary.txt; : > "$S"
. "$(dirname "$0")/device_libs.sh"
device_lib_path "$C" "$C/bin/critic_replay_bench" --help
W=/tmp/critic_work; rm -rf "$W"; mkdir -p "$W/corpus" "$W/jobs"
tar xzf "$C/jobs.tgz" -C "$W/jobs"
gunzip -c "$C/corpus/corpus.jsonl.gz" > "$W/corpus/corpus.jsonl" && cp "$C/corpus/tokenizer.json" "$W/corpus/"
echo "== device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$S"
JOBS=$(ls -d "$W"/jobs/* | paste -sd,)
FIRST=${JOBS%%,*}
common=(--base="$C/base" --device="${DEVICE:-cuda}" --steps="${STEPS:-128}" --every="${EVERY:-16}" --heldout="${HELDOUT:-96}")
[ -n "${LRS:-}" ] && common+=(--lrs="$LRS")
bench() {  # name, args...
  local name=$1; shift
  echo "== $name: critic_replay_bench $*" | tee -a "$S"
  timeout "${BENCH_TIMEOUT:-240}" "$C/bin/critic_replay_bench" "${common[@]}" "$@" > "$OUT/$name.jsonl" 2> "$OUT/$name.err"
  local rc=$?
  cat "$OUT/$name.jsonl" >> "$S"
  [ $rc = 0 ] || echo "FAILED ($name, rc $rc): $(tail -3 "$OUT/$name.err")" | tee -a "$S"
}
# The first job directory gives the hyper-parameters; the corpus's stage is trained on, the jobs held out.
for run in ${RUNS:-own next-job corpus-episodes corpus-prefixes}; do
  case $run in
    own) bench own --job_dir="$JOBS" --train=10000 ;;
    next-job) bench next-job --job_dir="$JOBS" --heldout_jobs=1 --train=10000 ;;
    corpus-*)  # The value set the run trains on (corpus-episodes, corpus-prefixes), written here.
      mode=${run#corpus-} flag=$([ "${run#corpus-}" = prefixes ] && echo true || echo false)
      echo "== value set $mode: $("$C/bin/corpus_value_set" --corpus_dir="$W/corpus" --out="$W/set-$mode" \
        --profile_prefixes=$flag 2>&1)" | tee -a "$S"
      bench "$run" --job_dir="$FIRST,$W/set-$mode,${JOBS#*,}" --train_stage=corpus --train=10000 ;;
  esac
done
echo "== done" | tee -a "$S"
