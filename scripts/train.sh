#!/usr/bin/env bash
# Quickstart 1: set up, build, and train the debug model on the CPU under mpirun, on the King
# James Bible. Extra arguments go to titan_train, e.g. --training.steps 50. NPROC=N runs N
# ranks, e.g. NPROC=8 scripts/train.sh --parallelism.dp_replicate 2 --parallelism.tp 2.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
# One rank uses the whole machine: without --bind-to none Open MPI pins it to a single core.
nproc=${NPROC:-1}
launcher=(mpirun -np "$nproc" --bind-to none)
[[ $(id -u) -eq 0 ]] && launcher+=(--allow-run-as-root)
# More ranks than cores (a laptop trying a mesh of 8) is fine, but Open MPI must be told.
(( nproc > $(nproc) )) && launcher+=(--oversubscribe)
exec "${launcher[@]}" build/titan_train --config configs/debug_model.yaml "$@"
