#!/usr/bin/env bash
# Builds the CPU-only tree with sanitizers and runs its tests (docs/sanitizers.md):
#
#   scripts/sanitize.sh asan [CTEST ARGS]   build-asan/: AddressSanitizer + LeakSanitizer + UBSan
#   scripts/sanitize.sh tsan [CTEST ARGS]   build-tsan/: ThreadSanitizer
#
# Without CTEST ARGS each runs its default selection (below); with them, only what they select,
# e.g. scripts/sanitize.sh tsan -R checkpoint, or scripts/sanitize.sh asan -L unit -j2.
#
# The tree is built as a machine without CUDA builds it (scripts/build_cpu_only.sh: the toolkit
# hidden), RelWithDebInfo: -O2 keeps the slow tests affordable, -g and frame pointers give
# whole stacks with lines. Every process the tests start (titan_train under mpirun included,
# whose exit code a test may not look at) writes its sanitizer reports into
# <tree>/sanitizer-reports/, and the run fails when that folder is not empty at the end, as when
# a test fails. Suppressions of third-party code: scripts/sanitizers/*.supp.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# The lines of a list in scripts/sanitizers/ (comments and blank lines dropped) as one ctest
# regular expression.
regex_of() { { grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "scripts/sanitizers/$1" || true; } | paste -sd '|'; }

kind=${1:-}
shift || true
case $kind in
  asan)
    tree=build-asan
    options=(-DTITAN_SANITIZE=address,undefined)
    # Everything but the Slurm and container tests (they test packaging, not our memory), the
    # gpu cases (they skip without a device) and the slowest mpi runs, left to the plain build
    # (docs/sanitizers.md lists them with their times).
    default=(-L 'unit|gradcheck|e2e|mpi' -LE 'slurm|container|gpu')
    left_out=$(regex_of asan_left_out.txt)
    [[ -n $left_out ]] && default+=(-E "$left_out")
    ;;
  tsan)
    tree=build-tsan
    options=(-DTITAN_SANITIZE=thread)
    # The tests whose code runs threads: async checkpoint saves, parameter initialisation,
    # titan_tokenize's pipeline, the profiler's tracks, MPI progress (every collective, async
    # TP's rings, a failing rank), and the trainer that drives them.
    default=(-R "$(regex_of tsan_tests.txt)" -LE 'slurm|container|gpu')
    ;;
  *)
    echo "usage: scripts/sanitize.sh asan|tsan [ctest args]" >&2
    exit 2
    ;;
esac
(($# > 0)) && selection=("$@") || selection=("${default[@]}")

scripts/setup.sh
BUILD_DIR=$tree scripts/build_cpu_only.sh -DCMAKE_BUILD_TYPE=RelWithDebInfo "${options[@]}"

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
# ASAN_OPTIONS=detect_stack_use_after_return=1 scripts/sanitize.sh asan -L unit.
export ASAN_OPTIONS="log_path=$reports/asan:halt_on_error=1:detect_leaks=1:fast_unwind_on_malloc=0:check_initialization_order=1:strict_init_order=1:${ASAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
export UBSAN_OPTIONS="log_path=$reports/ubsan:halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
export TSAN_OPTIONS="log_path=$reports/tsan:suppressions=$supp/tsan.supp:print_suppressions=0:second_deadlock_stack=1:history_size=4:${TSAN_OPTIONS:-}"
if [[ $kind == tsan ]]; then
  # OpenBLAS's worker threads hand their results back through spinning on plain flags, which
  # TSan, seeing only our side, reports as races on the GEMM's output: one thread for its GEMMs.
  export OPENBLAS_NUM_THREADS=1
fi

status=0
(cd "$tree" && ctest --output-on-failure --timeout 1500 "${selection[@]}") || status=$?

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
