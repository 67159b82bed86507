# Sourced by the ops sh_tests that drive `kernelrl up` (pid in $up, run dir in
# $run, scratch in $tmp, background pids in the array pids; fail() defined by
# the test).

# Waits until a command succeeds, failing early when `kernelrl up` has exited.
wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@"; do
    kill -0 "$up" 2>/dev/null || fail "kernelrl up exited while waiting for $what"
    [ $SECONDS -lt $deadline ] || fail "timed out waiting for $what"
    sleep 0.2
  done
}

# Starts a real Prometheus that scrapes every process of the cluster (each
# writes its metrics port to $run/<name>.ports; ports are pinned across
# restarts). Sets prom_port and adds its pid to pids.
start_prometheus() {
  local targets
  targets=$(for f in "$run"/*.ports; do printf '"127.0.0.1:%s",' "$(sed -n 's/^metrics_port=//p' "$f")"; done)
  prom_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cat > "$tmp/prometheus.yml" <<YML
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: kernelrl
    static_configs: [{targets: [${targets%,}]}]
YML
  prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
    --web.listen-address="127.0.0.1:${prom_port}" > "$tmp/prometheus.log" 2>&1 &
  pids+=($!)
}
