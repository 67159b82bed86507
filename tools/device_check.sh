#!/usr/bin/env bash
# Kept for old command lines: `tools/device.sh run [AREA...]` (docs/DEVICE.md).
exec bash "$(dirname "$0")/device.sh" run "$@"
