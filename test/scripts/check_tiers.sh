#!/usr/bin/env bash
# Every ctest test of this tree is in exactly one tier (test/cmake/tiers.cmake): the tests of
# the tiers, counted one tier at a time, add up to all the tests. A test in no tier would be
# run by no scripts/test.sh selection; a test in two would be run twice.
#
#   check_tiers.sh       (in a build tree; ctest runs it there)
set -euo pipefail
count() { ctest -N "$@" | sed -n 's/^Total Tests: //p'; }
total=$(count)
sum=0
for tier in fast check system matrix; do
  n=$(count -L "^$tier\$")
  echo "$tier: $n"
  sum=$((sum + n))
done
if ((sum != total)); then
  echo "check_tiers: $total tests, but the tiers hold $sum: every test needs exactly one of fast, check, system, matrix (register it with titan_add_test or titan_add_command_test)" >&2
  exit 1
fi
echo "check_tiers: all $total tests are in exactly one tier"
