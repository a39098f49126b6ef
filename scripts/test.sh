#!/usr/bin/env bash
# Quickstart 2: set up, build, and run every test (ctest). CI runs this through .ci/run.
# Tests labelled gpu skip with a one-line reason when no CUDA device is present.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd build
ctest --output-on-failure --timeout 1500 "$@"
