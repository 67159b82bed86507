#!/usr/bin/env bash
# Runs one of the harness's Python test scripts (argument: its path).
set -euo pipefail
exec python3 "$@"
