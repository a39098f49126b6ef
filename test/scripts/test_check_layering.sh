#!/usr/bin/env bash
# check_layering.py refuses a circle of includes between two folders, naming both files, and
# passes the same tree once the circle is broken: a planted parallel/ and parallel/comm/ pair.
set -euo pipefail
checker=${1:?usage: test_check_layering.sh CHECK_LAYERING_PY}
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/parallel/comm"
printf '#pragma once\n' >"$tree/parallel/runtime.h"
printf '#include "parallel/runtime.h"\n#include "parallel/comm/watchdog.h"\n' >"$tree/parallel/runtime.cpp"
printf '#pragma once\n' >"$tree/parallel/comm/watchdog.h"
printf '#include "parallel/comm/watchdog.h"\n#include "parallel/runtime.h"\n' >"$tree/parallel/comm/watchdog.cpp"
if out=$(python3 "$checker" "$tree" 2>&1); then
  echo "FAIL: the planted circle passed: $out"
  exit 1
fi
for file in parallel/runtime.cpp:2 parallel/comm/watchdog.cpp:2; do
  grep -qF "$file" <<<"$out" || { echo "FAIL: the refusal does not name $file: $out"; exit 1; }
done
printf '#include "parallel/comm/watchdog.h"\n' >"$tree/parallel/comm/watchdog.cpp"
python3 "$checker" "$tree" >/dev/null || { echo "FAIL: the tree without the circle was refused"; exit 1; }
echo "ok: the circle refused naming both files, the tree without it passed"
