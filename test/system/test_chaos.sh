#!/usr/bin/env bash
# The chaos test (system tier): scripts/chaos.sh, the tool users run, with ROUNDS faults on a
# run of 10 steps a round (so that no round reaches the end of the run), and a check that the
# rounds faulted ranks both ways: killed (SIGKILL, found by mpirun) and stopped (SIGSTOP, found
# by the MPI watchdog).
#
#   test/system/test_chaos.sh ROUNDS BINARY OUT
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:?usage: test_chaos.sh ROUNDS BINARY OUT}
binary=${2:?usage: test_chaos.sh ROUNDS BINARY OUT}
out=${3:?usage: test_chaos.sh ROUNDS BINARY OUT}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
scripts/chaos.sh --rounds "$rounds" --steps $((rounds * 10)) --binary "$binary" --out "$out" |
  tee "$log" || status=$?
for signal in KILL STOP; do
  if ! grep -qE "^chaos: round +[0-9]+: SIG$signal " "$log"; then
    echo "chaos test: FAILED: no round sent SIG$signal; both faults must be exercised (change the seed)"
    status=1
  fi
done
exit "$status"
