#!/usr/bin/env bash
# `kernelrl up` on the real binaries (CPU backend): the four processes come up
# SERVING; a real Prometheus scrapes all of them; then kill -9 of an actor, the
# sandbox worker and the learner, one after the other: each is restarted by
# the supervisor, on the same port, and SERVING again; Ctrl-C (SIGTERM) stops
# everything cleanly. Kills and recoveries are printed.
set -euo pipefail
command -v prometheus >/dev/null || { echo "prometheus not installed (apt-get install prometheus)"; exit 1; }
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
run="$tmp/run"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- up output"; cat "$tmp/up.out"; exit 1; }

tools/cli/kernelrl up --bin_dir="$PWD" --repo_dir="$PWD" --job=none --actors=2 --run_dir="$run" > "$tmp/up.out" 2>&1 &
up=$!
pids+=("$up")
. tests/ops_wait.sh
wait_for 120 "the cluster" grep -q "running; Ctrl-C stops the cluster" "$tmp/up.out"
grep -E "PROCESS|SERVING" "$tmp/up.out" | sed 's/^/  /'
[ "$(grep -c ' SERVING$' "$tmp/up.out")" = 4 ] || fail "not all 4 processes SERVING"

# A real Prometheus scrapes every process of the local cluster.
start_prometheus
python3 - "$prom_port" <<'PY' || fail "Prometheus did not see the cluster"
import json, sys, time, urllib.parse, urllib.request
q = 'count by (service) (kernelrl_build_info{job="kernelrl"})'
url = f"http://127.0.0.1:{sys.argv[1]}/api/v1/query?" + urllib.parse.urlencode({"query": q})
want = {"learner": 1, "sandbox": 1, "actor": 2}
got = None
for _ in range(120):
    try:
        result = json.load(urllib.request.urlopen(url, timeout=2))["data"]["result"]
        got = {r["metric"]["service"]: int(float(r["value"][1])) for r in result}
        if got == want:
            print(f"prometheus: {q} -> {got}")
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.5)
print("prometheus saw", got, "want", want)
sys.exit(1)
PY

# Chaos: kill -9 each kind of process; the supervisor brings it back on its port.
status_field() { awk -v n="$1" -v f="$2" '$1 == n {print $f}' "$run/up.status"; }
for victim in actor-0 sandbox learner; do
  pid=$(status_field "$victim" 2)
  restarts=$(status_field "$victim" 3)
  port=$(sed -n 's/^grpc_port=//p' "$run/$victim.ports")
  [ "$pid" -gt 0 ] || fail "$victim has no pid"
  echo "KILL  $victim: kill -9 $pid (grpc port $port)"
  t0=$(date +%s.%N)
  kill -9 "$pid"
  serving_again() {
    [ "$(status_field "$victim" 3)" -gt "$restarts" ] && [ "$(status_field "$victim" 4)" = running ] &&
      tools/health_probe "127.0.0.1:$port" > /dev/null 2>&1
  }
  wait_for 90 "$victim to recover" serving_again
  new_pid=$(status_field "$victim" 2)
  [ "$new_pid" != "$pid" ] || fail "$victim kept pid $pid"
  printf 'RECOVERED %s: pid %s -> %s, SERVING on port %s again after %.1f s\n' "$victim" "$pid" "$new_pid" \
    "$port" "$(echo "$(date +%s.%N) - $t0" | bc)"
  grep -q "$victim .*DIED: pid $pid, signal 9 (Killed)" "$tmp/up.out" || fail "no DIED line for $victim"
done

kill -TERM "$up"
rc=0; wait "$up" || rc=$?
pids=("${pids[@]:1}")
[ "$rc" = 0 ] || fail "kernelrl up exited $rc after SIGTERM"
stopped=$(grep -c " stopped$" "$run/up.status")
[ "$stopped" = 4 ] || fail "$stopped of 4 processes stopped cleanly"
grep -E "DIED|RECOVERED|stopped" "$tmp/up.out" | sed 's/^/  /'
echo "local cluster: 4 processes up, scraped by Prometheus, 3 kill -9 recovered, clean stop"
