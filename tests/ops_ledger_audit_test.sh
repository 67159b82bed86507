#!/usr/bin/env bash
set -euo pipefail
exec python3 tests/ops_ledger_audit_test.py
