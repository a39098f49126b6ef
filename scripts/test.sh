#!/usr/bin/env bash
# Quickstart 2: set up, build and run the tests, in tiers (docs/testing.md). CI runs it with no
# argument (.ci/run).
#
#   scripts/test.sh           the fast, check and system tiers of the main tree (build/: the
#                             CUDA backend too where nvcc is present; gpu tests skip without a
#                             device), the CPU-only tree with ASan and UBSan (build-asan/: the
#                             fast tier and one check case per end-to-end path), 10 s of fuzzing
#                             per reader of outside input (build-fuzz/; beside the ASan tests),
#                             then a timing table. The two other trees build beside the main
#                             tree's tests.
#   scripts/test.sh --fast    the main tree's fast tier only: the edit loop
#   scripts/test.sh --full    everything: the above, the matrix tier, and every check case
#                             under ASan
#   scripts/test.sh [--fast|--full] CTEST_ARGS...
#                             more ctest arguments for the main tree's tiers, e.g. -R mesh
#
# ctest runs as many tests at once as there are cores (TITAN_TEST_JOBS overrides): a test that
# starts N ranks counts as N (test/cmake/tiers.cmake), so the cores are never oversubscribed.
# Exit code: 0 when every selected test passed (or skipped: gpu tests without a device,
# root-only tests when not root), 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

mode=default
case ${1:-} in
  --fast) mode=fast; shift ;;
  --full) mode=full; shift ;;
esac
ctest_args=("$@")
jobs=${TITAN_TEST_JOBS:-$(nproc)}

timing=$root/build/test-timing
started=$SECONDS
status=0

# phase NAME COMMAND...: runs COMMAND, records how long it took, and remembers a failure.
phase() {
  local name=$1 start=$SECONDS code=0
  shift
  echo "test: $name"
  "$@" || code=$?
  printf '%s\t%d\t%d\n' "$name" $((SECONDS - start)) "$code" >> "$timing/phases.tsv"
  if ((code != 0)); then
    echo "test: $name FAILED (exit $code)"
    status=1
  fi
  return 0
}

# tier TREE TIER [CTEST ARGS...]: one tier of one tree's tests, with its report for the table.
tier() {
  local tree=$1 name=$2
  shift 2
  (cd "$tree" && ctest -L "^$name\$" -j "$jobs" --output-on-failure --timeout 2400 \
      --output-junit "$timing/$(basename "$tree")-$name.xml" "$@")
}

rm -rf "$timing"
mkdir -p "$timing"
# What the build needs first; then the main tree builds while the tests' packages and caches
# are fetched beside it (mostly waiting on the network), its output kept in a log.
phase "setup: the build's packages (scripts/setup.sh)" scripts/setup.sh
setup_log=$timing/setup-tests.log
(
  start=$SECONDS code=0
  scripts/setup.sh --tests > "$setup_log" 2>&1 || code=$?
  printf '%s\t%d\t%d\n' "setup: the tests' packages and caches (--tests, beside the build)" \
    $((SECONDS - start)) "$code" > "$timing/setup-tests.tsv"
  exit "$code"
) &
setup_tests=$!

phase "build: build/ (main tree)" scripts/build.sh
if ! wait "$setup_tests"; then
  cat "$setup_log"
  echo "test: scripts/setup.sh --tests failed (its output is above)"
  status=1
fi
cat "$timing/setup-tests.tsv" >> "$timing/phases.tsv"
if ((status != 0)); then
  echo "test: set-up or the main tree's build failed (above); nothing was tested"
  exit 1
fi

# The other trees build beside the main tree's tests, at the lowest priority (nice 19): they
# take the cores mostly while the tests leave them idle (the system tier waits on daemons and
# jobs much of its time), which saves CI most of their build. Nice ranks processes within one
# cgroup only: the container test's image build runs in podman's own cgroup and shares the
# cores evenly with them (docs/testing.md gives both times).
export TITAN_TEST_TIMING=$timing TITAN_TEST_JOBS=$jobs
other_trees=""
if [[ $mode != fast ]]; then
  (
    export TITAN_BUILD_NOTE=" (beside the tests, nice 19)"
    code=0
    nice -n 19 scripts/sanitize.sh asan --build-only || code=1
    nice -n 19 scripts/fuzz.sh --build-only || code=1
    exit "$code"
  ) > "$timing/other-trees.log" 2>&1 &
  other_trees=$!
fi

phase "tests: build/ fast tier" tier build fast "${ctest_args[@]}"
if [[ $mode != fast ]]; then
  phase "tests: build/ check tier" tier build check "${ctest_args[@]}"
  phase "tests: build/ system tier" tier build system "${ctest_args[@]}"
  [[ $mode == full ]] && phase "tests: build/ matrix tier" tier build matrix "${ctest_args[@]}"

  if ! wait "$other_trees"; then
    cat "$timing/other-trees.log"
    echo "test: building build-asan/ or build-fuzz/ failed (the log is above)"
    status=1
  fi
  # The CPU-only tree under AddressSanitizer, LeakSanitizer and UBSan, built as a machine
  # without the CUDA toolkit builds it (docs/sanitizers.md), and beside its tests every reader
  # of outside input under libFuzzer, one target at a time (docs/fuzzing.md): a target fuzzes
  # for its seconds of wall time either way, and the sanitized tests, though slower beside it,
  # end sooner than the two ran one after the other (docs/testing.md has both times). Each
  # writes its own lines of the timing table.
  # Every reader's seed corpus is replayed and then fuzzed for a short while on each run (10 s a
  # target, 20 s with --full); hours of fuzzing are for `scripts/fuzz.sh SECONDS` on a machine
  # of its own (docs/fuzzing.md).
  fuzz_seconds=${TITAN_FUZZ_SECONDS:-$([[ $mode == full ]] && echo 20 || echo 10)}
  echo "test: fuzzing every reader beside the sanitized tests (scripts/fuzz.sh, $fuzz_seconds s a target, one at a time)"
  FUZZ_PARALLEL=1 TITAN_FUZZ_NOTE=" (beside the ASan tests)" \
    scripts/fuzz.sh "$fuzz_seconds" > "$timing/fuzz.log" 2>&1 &
  fuzzing=$!
  echo "test: the CPU-only tree with ASan and UBSan (scripts/sanitize.sh asan --${mode/default/ci})"
  scripts/sanitize.sh asan "--${mode/default/ci}" || status=1
  fuzz_code=0
  wait "$fuzzing" || fuzz_code=$?
  cat "$timing/fuzz.log"
  ((fuzz_code == 0)) || status=1
fi

printf '%s\t%d\t%d\n' "total" $((SECONDS - started)) "$status" >> "$timing/phases.tsv"
python3 scripts/test_timing.py "$timing" "$jobs"
exit "$status"
