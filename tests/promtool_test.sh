#!/usr/bin/env bash
# `promtool check metrics` on (1) a fixture exposition with every metric type,
# escapes, special values and overflow, and (2) the live /metrics of a running
# sandbox binary after it has answered RPCs.
set -euo pipefail
command -v promtool >/dev/null || { echo "promtool not installed (apt-get install prometheus)"; exit 1; }
tmp="${TEST_TMPDIR:-$(mktemp -d)}"

tests/metrics_fixture > "$tmp/fixture.prom"
grep -q 'kernelrl_fixture_verdicts_total{outcome="__overflow__",task="__overflow__"} 8' "$tmp/fixture.prom"
promtool check metrics < "$tmp/fixture.prom"
echo "fixture exposition: promtool clean ($(wc -l < "$tmp/fixture.prom") lines)"

sandbox/sandbox_main --set=backend=cpu --set=server.grpc_port=0 --set=server.metrics_port=0 \
  --set=server.port_file="$tmp/ports" --set=server.drain_seconds=0 2> "$tmp/sandbox.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
# The port file appears once the worker serves (seconds on a loaded machine); 60 s bounds a failure.
for _ in $(seq 600); do [ -s "$tmp/ports" ] && break; sleep 0.1; done
metrics_port=$(sed -n 's/^metrics_port=//p' "$tmp/ports")
python3 - "$metrics_port" > "$tmp/live.prom" <<'PY'
import sys, urllib.request
print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode(), end="")
PY
grep -q '^kernelrl_build_info{service="sandbox"} 1$' "$tmp/live.prom"
promtool check metrics < "$tmp/live.prom"
echo "live sandbox exposition: promtool clean ($(wc -l < "$tmp/live.prom") lines)"
