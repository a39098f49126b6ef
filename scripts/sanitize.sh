#!/usr/bin/env bash
# Builds the CPU-only tree with sanitizers and runs its tests (docs/sanitizers.md):
#
#   scripts/sanitize.sh asan [--ci|--full|CTEST ARGS]   build-asan/: AddressSanitizer +
#                                                       LeakSanitizer + UBSan
#   scripts/sanitize.sh tsan [CTEST ARGS]               build-tsan/: ThreadSanitizer
#   scripts/sanitize.sh asan|tsan --build-only          the tree, and no test
#
# asan --ci (the default; scripts/test.sh runs it) runs the fast tier but the tests that run no
# compiled code of ours or only paths smaller ones take (scripts/sanitizers/asan_fast_left_out.txt)
# and one check case per end-to-end path (scripts/sanitizers/asan_check.txt); asan --full
# (scripts/test.sh --full) the fast and check tiers but the slowest
# (scripts/sanitizers/asan_left_out.txt). tsan runs the tests whose code runs threads
# (scripts/sanitizers/tsan_tests.txt). With CTEST ARGS, only what they select, e.g.
# scripts/sanitize.sh tsan -R checkpoint, or scripts/sanitize.sh asan -L fast.
# Tests run TITAN_TEST_JOBS at once (default: the cores); with TITAN_TEST_TIMING set to a folder
# (scripts/test.sh does), each run's time goes to its phases.tsv and its tests' to JUnit files.
#
# The tree is built as a machine without CUDA builds it (scripts/build_cpu_only.sh: the toolkit
# hidden), with frame pointers and line tables, so that every report has whole stacks with
# lines: ASan's at -O1 -g1, which compiles in half the time of -O2 -g (the tests spend most of
# their time in OpenBLAS, which is not instrumented either way), TSan's at -O2 -g. UBSan's
# vptr check (a member call through an object of the wrong dynamic type) is left out of the
# ASan tree: it costs a quarter of the tree's compile time, for a class of bug that the few
# interfaces here (Communicator, MetricSink, TokenSource) make unlikely. The tests' own sources
# compile at -O0 (TITAN_TEST_OPTIMIZATION): with UBSan's checks, optimizing them took 60% of
# their compile, and their time is spent in the code under test. Every
# process the tests start (titan_train under mpirun included, whose exit code a test may not
# look at) writes its sanitizer reports into
# <tree>/sanitizer-reports/, and the run fails when that folder is not empty at the end, as when
# a test fails. Suppressions of third-party code: scripts/sanitizers/*.supp.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# The lines of a list in scripts/sanitizers/ (comments and blank lines dropped) as one ctest
# regular expression. A missing list would select nothing, or leave nothing out, without a word:
# so it is an error, and callers assign the result first (set -e stops at a failed assignment,
# not at a failed substitution inside a command's arguments).
regex_of() {
  [[ -f scripts/sanitizers/$1 ]] || { echo "sanitize: scripts/sanitizers/$1 is missing" >&2; exit 2; }
  { grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "scripts/sanitizers/$1" || true; } | paste -sd '|'
}

kind=${1:-}
shift || true
# shellcheck disable=SC2054  # address,undefined is one argument: the sanitizers' list
case $kind in
  asan) tree=build-asan options=(-DTITAN_SANITIZE=address,undefined
                                 "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG -fno-sanitize=vptr"
                                 -DTITAN_TEST_OPTIMIZATION=-O0) ;;
  tsan) tree=build-tsan options=(-DTITAN_SANITIZE=thread -DTITAN_TEST_OPTIMIZATION=-O0) ;;
  *)
    echo "usage: scripts/sanitize.sh asan [--ci|--full|ctest args] | tsan [ctest args]" >&2
    exit 2
    ;;
esac
selection=${1:---ci}
case $kind:$selection in
  *:--build-only | asan:--ci | asan:--full) shift ;;
esac

# record NAME SECONDS CODE: a line of scripts/test.sh's timing table.
record() {
  [[ -n ${TITAN_TEST_TIMING:-} ]] || return 0
  printf '%s\t%d\t%d\n' "$1" "$2" "$3" >> "$TITAN_TEST_TIMING/phases.tsv"
}

# run_tests NAME CTEST_ARGS...: one ctest run of the tree (its JUnit report and time kept for
# the timing table); a failure fails the whole run.
status=0
run_tests() {
  local name=$1 start=$SECONDS code=0 junit=()
  shift
  [[ -n ${TITAN_TEST_TIMING:-} ]] &&
    junit=(--output-junit "$TITAN_TEST_TIMING/$tree-${name%% *}.xml")
  echo "sanitize: $kind: $name"
  (cd "$tree" && ctest -j "${TITAN_TEST_JOBS:-$(nproc)}" --output-on-failure --timeout 2400 \
      "${junit[@]}" "$@") || code=$?
  ((code == 0)) || status=1
  record "tests: $tree/ $name" $((SECONDS - start)) "$code"
}

scripts/setup.sh --tests
start=$SECONDS
BUILD_DIR=$tree scripts/build_cpu_only.sh -DCMAKE_BUILD_TYPE=RelWithDebInfo "${options[@]}"
record "build: $tree/${TITAN_BUILD_NOTE:-}" $((SECONDS - start)) 0
[[ $selection == --build-only ]] && exit 0

reports=$root/$tree/sanitizer-reports
rm -rf "$reports"
mkdir -p "$reports"
supp=$root/scripts/sanitizers
# Reports go to files (<tool>.<pid>), not to stderr, so that no child's report is lost in a test
# that does not print its output; any report ends the process (halt_on_error) except TSan's,
# which report and go on so that one run shows every race (the folder check fails the run).
# fast_unwind_on_malloc=0: allocation stacks unwound through Open MPI's libraries, which have no
# frame pointers, down to the library that allocated, which is what lsan.supp matches.
# Options already in the environment come last and win, e.g.
# ASAN_OPTIONS=detect_stack_use_after_return=1 scripts/sanitize.sh asan -L fast.
export ASAN_OPTIONS="log_path=$reports/asan:halt_on_error=1:detect_leaks=1:fast_unwind_on_malloc=0:check_initialization_order=1:strict_init_order=1:${ASAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
export UBSAN_OPTIONS="log_path=$reports/ubsan:halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
export TSAN_OPTIONS="log_path=$reports/tsan:suppressions=$supp/tsan.supp:print_suppressions=0:second_deadlock_stack=1:history_size=4:${TSAN_OPTIONS:-}"
if [[ $kind == tsan ]]; then
  # OpenBLAS's worker threads hand their results back through spinning on plain flags, which
  # TSan, seeing only our side, reports as races on the GEMM's output: one thread for its GEMMs.
  export OPENBLAS_NUM_THREADS=1
fi

# Never the system tier (it tests packaging, not our memory) nor gpu tests (they skip without
# a device, and a sanitized tree is CPU only).
if (($# > 0)); then
  run_tests "selected tests" "$@"
elif [[ $kind == tsan ]]; then
  # The tests whose code runs threads: async checkpoint saves, parameter initialisation,
  # titan_tokenize's pipeline, the profiler's tracks, MPI progress (every collective, async
  # TP's rings, a failing rank), and the trainer that drives them.
  threaded=$(regex_of tsan_tests.txt)
  run_tests "threaded tests" -R "$threaded" -LE 'system|gpu'
elif [[ $selection == --ci ]]; then
  fast_left_out=$(regex_of asan_fast_left_out.txt)
  check_cases=$(regex_of asan_check.txt)
  run_tests "fast tier" -L '^fast$' -LE gpu -E "$fast_left_out"
  run_tests "check tier, one case per path" -L '^check$' -LE gpu -R "$check_cases"
else
  check_left_out=$(regex_of asan_left_out.txt)
  run_tests "fast tier" -L '^fast$' -LE gpu
  run_tests "check tier" -L '^check$' -LE gpu -E "$check_left_out"
fi

mapfile -t found < <(find "$reports" -type f | sort)
if ((${#found[@]} > 0)); then
  echo "sanitize: ${#found[@]} sanitizer report(s) in $reports:"
  for report in "${found[@]:0:10}"; do
    echo "==== $report"
    head -n 80 "$report"
  done
  ((${#found[@]} > 10)) && printf 'and %s more:\n' $((${#found[@]} - 10)) && printf '  %s\n' "${found[@]:10}"
  status=1
fi
if ((status == 0)); then
  echo "sanitize: $kind: the tests passed and no process wrote a sanitizer report"
else
  echo "sanitize: $kind: FAILED (failed tests above, or sanitizer reports)"
fi
exit "$status"
