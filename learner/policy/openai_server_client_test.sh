#!/usr/bin/env bash
# The `openai` Python client (PyPI) against the learner's real OpenAI-compatible
# server: learner_main with the policy engine on CPU over a tiny random
# checkpoint this test makes. The checks are in openai_server_client_test.py.
set -euo pipefail
PY="${KERNELRL_PYTHON:-python3}"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
FX="$TMP/fx"
"$PY" learner/policy/openai_server_fixture.py "$FX" "$RANDOM" > "$TMP/fixture.log" 2>&1 || { cat "$TMP/fixture.log"; exit 1; }

PORT_FILE="$TMP/openai_port"
learner/learner_main --config_text="
  server { listen_address: '127.0.0.1' grpc_port: 0 metrics_port: -1 drain_seconds: 0 grace_seconds: 2 }
  state_dir: '$TMP/state'
  policy { enabled: true model_path: '$FX' device: 'cpu' max_batch: 4 max_seq_len: 2048
           initial_policy_version: 7 openai_enabled: true openai_port: 0 openai_port_file: '$PORT_FILE'
           served_model_name: 'tiny-policy' }" > "$TMP/learner.log" 2>&1 &
LEARNER=$!
trap 'kill $LEARNER 2>/dev/null || true; wait $LEARNER 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  [[ -s "$PORT_FILE" ]] && break
  kill -0 $LEARNER 2>/dev/null || { echo "learner_main exited:"; cat "$TMP/learner.log"; exit 1; }
  sleep 0.1
done
[[ -s "$PORT_FILE" ]] || { echo "no OpenAI port after 60 s:"; cat "$TMP/learner.log"; exit 1; }
PORT="$(sed -n 's/^openai_port=//p' "$PORT_FILE")"
"$PY" learner/policy/openai_server_client_test.py "http://127.0.0.1:$PORT/v1" "$FX" || {
  echo "--- learner log"; tail -50 "$TMP/learner.log"; exit 1; }
