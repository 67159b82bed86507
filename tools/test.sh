#!/usr/bin/env bash
# The test command (README and CI run exactly this): install what is missing,
# then build everything and run every test. GPU tests skip on machines without
# a GPU and print why.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel test //... "$@"
