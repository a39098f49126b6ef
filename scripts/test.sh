#!/usr/bin/env bash
# Quickstart 2: set up, build, and run every test (ctest). CI runs this through .ci/run.
# Extra arguments go to the main tree's ctest, e.g. scripts/test.sh -L unit, or -j2.
#
# Tests labelled gpu skip with a one-line reason when no CUDA device is present; slurm and
# container tests install what they need and skip when not root.
#
# When build/ has the CUDA backend (nvcc was found), a second tree, build-cpu/, is built the
# way a machine without the toolkit builds it (scripts/build_cpu_only.sh) and runs its unit,
# gradcheck and single-process end-to-end tests: the CPU-only build is what a new user without
# CUDA gets, and a CUDA machine would otherwise never compile it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh

status=0
(cd build && ctest --output-on-failure --timeout 1500 "$@") || status=$?

if grep -q '^TITAN_CUDA:BOOL=ON' build/CMakeCache.txt; then
  echo "test: the CPU-only tree"
  scripts/build_cpu_only.sh
  (cd build-cpu && ctest --output-on-failure --timeout 1500 -L 'unit|gradcheck|e2e' -LE 'mpi') ||
    status=$?
fi

# Every reader of outside input under libFuzzer with ASan + UBSan, briefly (docs/fuzzing.md):
# a clang-14 tree in build-fuzz/, 20 s a target; fails on any crash or contract violation.
echo "test: fuzzing every reader (scripts/fuzz.sh, ${TITAN_FUZZ_SECONDS:-20} s a target)"
scripts/fuzz.sh "${TITAN_FUZZ_SECONDS:-20}" || status=$?
exit "$status"
