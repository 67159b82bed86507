#!/usr/bin/env bash
# judge_measurements exits non-zero when an expected flag is missing or an honest case is flagged.
set -euo pipefail
out=$("$1" "$2")
echo "$out"
[ "$(echo "$out" | grep -c '^PASS')" -ge 8 ]
