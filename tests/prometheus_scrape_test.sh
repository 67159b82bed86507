#!/usr/bin/env bash
# Starts a real Prometheus on loopback, has it scrape a running learner binary,
# and reads kernelrl_build_info{service="learner"} back through /api/v1/query.
set -euo pipefail
command -v prometheus >/dev/null || { echo "prometheus not installed (apt-get install prometheus)"; exit 1; }
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT

learner/learner_main --set=server.grpc_port=0 --set=server.metrics_port=0 --set=state_dir="$tmp/learner-state" \
  --set=server.port_file="$tmp/ports" --set=server.drain_seconds=0 2> "$tmp/learner.log" &
pids+=($!)
# The port file appears once the worker serves (seconds on a loaded machine); 60 s bounds a failure.
for _ in $(seq 600); do [ -s "$tmp/ports" ] && break; sleep 0.1; done
metrics_port=$(sed -n 's/^metrics_port=//p' "$tmp/ports")
[ -n "$metrics_port" ] || { cat "$tmp/learner.log"; exit 1; }

prom_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$tmp/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: kernelrl
    static_configs:
      - targets: ["127.0.0.1:${metrics_port}"]
YML
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:${prom_port}" > "$tmp/prometheus.log" 2>&1 &
pids+=($!)

python3 - "$prom_port" <<'PY'
import json, sys, time, urllib.parse, urllib.request
port = sys.argv[1]
query = 'kernelrl_build_info{service="learner",job="kernelrl"}'
url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
deadline = time.time() + 60
last = None
while time.time() < deadline:
    try:
        body = json.load(urllib.request.urlopen(url, timeout=2))
        last = body
        result = body.get("data", {}).get("result", [])
        if body.get("status") == "success" and result:
            value = float(result[0]["value"][1])
            assert value == 1.0, f"unexpected value {value}"
            print(f"prometheus read back {query} = {value}")
            sys.exit(0)
    except OSError:
        pass  # Prometheus still starting.
    time.sleep(0.5)
print("series never appeared; last answer:", last)
sys.exit(1)
PY
