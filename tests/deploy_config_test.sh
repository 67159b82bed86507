#!/usr/bin/env bash
set -euo pipefail
exec python3 tests/deploy_config_test.py
