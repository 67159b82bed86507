#!/usr/bin/env bash
# The embedded single-machine cluster: builds and starts learner, sandbox,
# profiler and actor on loopback with their default ports, reports each one's
# grpc.health.v1 status and /metrics endpoint, then runs until Ctrl-C (SIGTERM
# to every service: each drains and exits cleanly).
#   --check   report health, stop everything, exit non-zero unless all SERVING.
#   Extra arguments after `--` go to every service (e.g. -- --set=server.log_level=debug).
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --check) check=1 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
  shift
done

bash tools/setup.sh
bazel build //learner:learner_main //sandbox:sandbox_main //profiler_service:profiler_main \
  //actor:actor_main //tools:health_probe 2>&1 | tail -1
bin="$(bazel info bazel-bin 2>/dev/null)"
run_dir="$(mktemp -d /tmp/kernelrl-local.XXXXXX)"
declare -A binary=([learner]=learner/learner_main [sandbox]=sandbox/sandbox_main
                   [profiler]=profiler_service/profiler_main [actor]=actor/actor_main)
order=(learner sandbox profiler actor)
declare -A own_args=()
# Without a GPU the sandbox evaluates with its CPU backend (same protocol, C++ candidates).
if ! nvidia-smi -L > /dev/null 2>&1; then
  echo "no GPU here: the sandbox runs its CPU backend"
  own_args[sandbox]="--set=backend=cpu"
fi
pids=()
stop() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop EXIT
trap 'echo; echo "stopping (SIGTERM: drain, then exit)"; exit 0' INT TERM

for svc in "${order[@]}"; do
  "$bin/${binary[$svc]}" --set=server.port_file="$run_dir/$svc.ports" ${own_args[$svc]:-} ${extra[@]+"${extra[@]}"} \
    2> "$run_dir/$svc.log" &
  pids+=($!)
done

all_ok=1
printf '%-10s %-22s %-32s %s\n' SERVICE GRPC METRICS HEALTH
for svc in "${order[@]}"; do
  for _ in $(seq 100); do [ -s "$run_dir/$svc.ports" ] && break; sleep 0.1; done
  if [ ! -s "$run_dir/$svc.ports" ]; then
    printf '%-10s %s\n' "$svc" "FAILED TO START: $(tail -1 "$run_dir/$svc.log")"
    all_ok=0
    continue
  fi
  grpc_port=$(sed -n 's/^grpc_port=//p' "$run_dir/$svc.ports")
  metrics_port=$(sed -n 's/^metrics_port=//p' "$run_dir/$svc.ports")
  health=$("$bin/tools/health_probe" "127.0.0.1:$grpc_port") || all_ok=0
  printf '%-10s %-22s %-32s %s\n' "$svc" "127.0.0.1:$grpc_port" "http://127.0.0.1:$metrics_port/metrics" "$health"
done
echo "logs: $run_dir"
if [ "$check" = 1 ]; then
  [ "$all_ok" = 1 ] && echo "all services SERVING" || { echo "some services are not serving"; exit 1; }
  exit 0
fi
echo "running; Ctrl-C stops the cluster"
wait
