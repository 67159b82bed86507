#!/usr/bin/env bash
# End to end on the real binaries, CPU only: `kernelrl up` runs a 4-step job of
# the scripted policy (tiny random model, CPU tasks). Stage by stage it shows
# tasks leased, rollouts, verdicts, trajectories accepted, a PPO step and a new
# policy version (learner ledger + job API), and the same activity in a real
# Prometheus scraping every process. A pause and resume through the job API
# (`kernelrl job pause|resume`) after step 1, then chaos during that job: kill -9
# of an actor, of the sandbox worker after step 2, of the learner after step 3.
# The job still SUCCEEDS at step 4 / policy v4 and the ledger audit
# (tests/ops_ledger_audit.py) finds no trajectory lost, duplicated or phantom.
set -euo pipefail
command -v prometheus >/dev/null || { echo "prometheus not installed (apt-get install prometheus)"; exit 1; }
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
run="$tmp/run"
mkdir -p "$run"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
T0=$SECONDS
say() { printf '[test %4ds] %s\n' $((SECONDS - T0)) "$*"; }
fail() { say "FAIL: $*"; echo "--- kernelrl up output"; cat "$tmp/up.out"; for f in "$run"/*.log; do echo "--- $f"; tail -5 "$f"; done; exit 1; }

# The quickstart's model and tasks, made here; `kernelrl up` reuses them.
python3 tools/cli/up_quickstart.py "$run/quickstart" "$PWD" > "$tmp/assets.log" 2>&1 || { cat "$tmp/assets.log"; exit 1; }
cat > "$tmp/job.textproto" <<EOF2
name: "e2e-chaos"
base_checkpoint: "$run/quickstart/model"
task_set: "$run/quickstart/tasks.jsonl"
max_steps: 4
rollouts_per_task: 1
hyperparameters_text: "recipe { single_turn_ppo { skip: true } agent_warmup { skip: true } rft { skip: true } value_pretrain { skip: true } agentic_ppo { steps: 4 max_turns: 8 take_policies: \"scripted\" } } batch { trajectories_per_step: 2 } ingest { max_policy_lag: 1000 } device { device: \"cpu\" dtype: \"float32\" }"
EOF2

tools/cli/kernelrl up --bin_dir="$PWD" --repo_dir="$PWD" --run_dir="$run" --job_spec="$tmp/job.textproto" \
  --actors=2 --set=actor.concurrent_rollouts=2 --job_timeout_s=600 --stall_timeout_s=240 > "$tmp/up.out" 2>&1 &
up=$!
pids+=("$up")
. tests/ops_wait.sh
wait_for 180 "the cluster" grep -q "submitted job" "$tmp/up.out"
say "cluster up, job submitted: $(grep -o 'submitted job .*' "$tmp/up.out")"

# A real Prometheus scrapes every process (ports are pinned across restarts).
start_prometheus

ledger() { cat "$run"/learner-state/jobs/*/ledger.jsonl 2>/dev/null || true; }
ledger_has() { ledger | grep -q "\"kind\":\"$1\""; }
step_seen() { grep -qE "RUNNING +step $1 +policy v$1 " "$tmp/up.out"; }

# --- End to end, stage by stage.
wait_for 120 "a task lease" ledger_has LEASED
say "STAGE tasks leased: $(ledger | grep -c '"kind":"LEASED"') leases in the ledger"
wait_for 240 "an accepted trajectory" ledger_has ACCEPTED
say "STAGE rollouts -> verdicts -> trajectories: $(ledger | grep -c '"kind":"ACCEPTED"') trajectories accepted"
wait_for 300 "PPO step 1" step_seen 1
say "STAGE PPO step and new policy version: $(grep -oE 'RUNNING +step 1 +policy v1 +\([^)]*\)' "$tmp/up.out" | head -1)"
ledger_has TRAINED && ledger_has COMMITTED || fail "step 1 without TRAINED/COMMITTED ledger records"
python3 - "$prom_port" <<'PY' || fail "Prometheus did not see the job's activity"
import json, sys, time, urllib.parse, urllib.request
port = sys.argv[1]
queries = {
    "rollouts finished (actors)": 'sum(kernelrl_actor_rollouts_total)',
    "verdicts (sandbox)": 'sum(kernelrl_sandbox_evaluations_total)',
    "trajectories pushed (actors)": 'sum(kernelrl_actor_pushes_total)',
    "leases served (learner)": 'sum(kernelrl_grpc_server_handled_total{service="learner",method=~".*/LeaseTasks"})',
    "trajectory streams (learner)": 'sum(kernelrl_grpc_server_handled_total{service="learner",method=~".*/PushTrajectories"}) or sum(kernelrl_grpc_server_in_flight{service="learner"})',
}
deadline = time.time() + 90
pending = dict(queries)
while pending and time.time() < deadline:
    for name, q in list(pending.items()):
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
        try:
            result = json.load(urllib.request.urlopen(url, timeout=2))["data"]["result"]
        except OSError:
            continue
        if result and float(result[0]["value"][1]) > 0:
            print(f"           prometheus: {name}: {q} = {float(result[0]['value'][1]):g}")
            del pending[name]
    time.sleep(0.5)
if pending:
    print("not seen in Prometheus:", list(pending))
    sys.exit(1)
PY
say "STAGE metrics visible in Prometheus"

# --- Pause and resume through the job API: the trainer holds at a step boundary (no step while
# held), the learner's paused-jobs gauge says so (the stall alert leaves it out), and the job goes on.
learner_addr="127.0.0.1:$(sed -n 's/^grpc_port=//p' "$run/learner.ports")"
job_id=$(basename "$(ls -d "$run"/learner-state/jobs/*/)")
job() { tools/cli/kernelrl job "$@" --learner="$learner_addr"; }
job pause "$job_id" --reason="chaos test" > "$tmp/pause.out" || fail "kernelrl job pause: $(cat "$tmp/pause.out")"
held() { job get "$job_id" | grep -q "^held: true"; }
wait_for 120 "the job to hold" held
step_held=$(job get "$job_id" | sed -n 's/^step: //p')
paused_gauge=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' \
  "http://127.0.0.1:$(sed -n 's/^metrics_port=//p' "$run/learner.ports")/metrics" | sed -n 's/^kernelrl_learner_jobs_paused //p')
[ "$paused_gauge" = 1 ] || fail "kernelrl_learner_jobs_paused is '$paused_gauge' while the job is held"
sleep 3
[ "$(job get "$job_id" | sed -n 's/^step: //p')" = "$step_held" ] || fail "the held job took a step"
job resume "$job_id" > /dev/null || fail "kernelrl job resume"
say "PAUSED the job at step ${step_held:-0} (held, kernelrl_learner_jobs_paused 1, no step in 3 s), resumed"

# --- Chaos during the same job.
status_field() { awk -v n="$1" -v f="$2" '$1 == n {print $f}' "$run/up.status"; }
kill9() {  # kill9 NAME: kill -9 it and wait until the supervisor restarted it
  local victim=$1 pid restarts
  pid=$(status_field "$victim" 2); restarts=$(status_field "$victim" 3)
  [ "${pid:-0}" -gt 0 ] || fail "$victim has no pid"
  say "KILL $victim: kill -9 $pid"
  kill -9 "$pid"
  recovered() { [ "$(status_field "$victim" 3)" -gt "$restarts" ] && [ "$(status_field "$victim" 4)" = running ]; }
  wait_for 120 "$victim to be restarted" recovered
  say "RECOVERED $victim: new pid $(status_field "$victim" 2) (restart $(status_field "$victim" 3))"
}
kill9 actor-0
wait_for 300 "PPO step 2" step_seen 2
say "job at step 2 after the actor kill"
kill9 sandbox
wait_for 300 "PPO step 3" step_seen 3
say "job at step 3 after the sandbox kill"
kill9 learner
rc=0; wait "$up" || rc=$?
pids=("${pids[@]:1}")
grep -q "learner reachable again" "$tmp/up.out" && say "kernelrl up followed the job across the learner restart"
[ "$rc" = 0 ] || fail "kernelrl up exited $rc"
grep -qE "SUCCEEDED +step 4 +policy v4 " "$tmp/up.out" || fail "the job did not succeed at step 4 / policy v4"
say "JOB SUCCEEDED: $(grep -oE 'job .*: SUCCEEDED after .*' "$tmp/up.out")"
grep -E "DIED|RECOVERED|learner unreachable|reachable again" "$tmp/up.out" | sed 's/^/           /'

# --- The ledger: nothing lost, nothing twice.
job_dir=$(ls -d "$run"/learner-state/jobs/*/)
buffered=$(sed -n 's/^\[up *[0-9.]*s\]   buffer_depth *//p' "$tmp/up.out" | tail -1)
python3 tests/ops_ledger_audit.py "$job_dir/ledger.jsonl" --buffered="${buffered:-0}" \
  --trajectories_dir="$job_dir/trajectories" || fail "ledger audit"
say "e2e + chaos: 4 PPO steps, 3 kill -9 recovered, no trajectory lost or duplicated"
