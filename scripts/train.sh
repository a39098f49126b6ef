#!/usr/bin/env bash
# Quickstart 1: set up, build, and train the debug model on the CPU under mpirun, on the King
# James Bible. Extra arguments go to titan_train, e.g. --training.steps 50.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
# One rank uses the whole machine: without --bind-to none Open MPI pins it to a single core.
launcher=(mpirun -np 1 --bind-to none)
[[ $(id -u) -eq 0 ]] && launcher+=(--allow-run-as-root)
exec "${launcher[@]}" build/titan_train --config configs/debug_model.yaml "$@"
