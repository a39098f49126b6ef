#!/usr/bin/env bash
# Quickstart 2: set up, build, and run every test (ctest). CI runs this through .ci/run.
# Extra arguments go to the main tree's ctest, e.g. scripts/test.sh -L unit, or -j2.
#
# Tests labelled gpu skip with a one-line reason when no CUDA device is present; slurm and
# container tests install what they need and skip when not root.
#
# A second tree, build-asan/, is the CPU-only build with AddressSanitizer, LeakSanitizer and
# UBSan (scripts/sanitize.sh asan, docs/sanitizers.md): built the way a machine without the CUDA
# toolkit builds it (scripts/build_cpu_only.sh), so a CUDA machine compiles the CPU-only build
# a new user without CUDA gets, and without CUDA it is the same code again, sanitized. It runs
# the unit, gradcheck, e2e and mpi tests but the slowest (scripts/sanitizers/asan_left_out.txt,
# run by the main tree only), and fails on any sanitizer report from any process.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh

status=0
(cd build && ctest --output-on-failure --timeout 1500 "$@") || status=$?

echo "test: the CPU-only tree with ASan and UBSan (scripts/sanitize.sh asan)"
scripts/sanitize.sh asan || status=$?

# Every reader of outside input under libFuzzer with ASan + UBSan, briefly (docs/fuzzing.md):
# a clang-14 tree in build-fuzz/, 20 s a target; fails on any crash or contract violation.
echo "test: fuzzing every reader (scripts/fuzz.sh, ${TITAN_FUZZ_SECONDS:-20} s a target)"
scripts/fuzz.sh "${TITAN_FUZZ_SECONDS:-20}" || status=$?
exit "$status"
