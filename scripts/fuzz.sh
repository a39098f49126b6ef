#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, docs/fuzzing.md) with clang-14, ASan and UBSan in
# build-fuzz/, and runs each from its seed corpus for SECONDS (default 20). Exits 1 when any
# target finds a crash, a contract violation, a leak, a hang (-timeout) or an oversized
# allocation (-malloc_limit_mb, -rss_limit_mb); the input that did it is saved as
# build-fuzz/artifacts/<target>-crash-… (replay: build-fuzz/fuzz/<target> FILE).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     e.g. scripts/fuzz.sh 600 fuzz_safetensors
#   scripts/fuzz.sh --build-only              build-fuzz/, and no run
#
# New interesting inputs go to build-fuzz/corpus/<target>/, never into the repository's seeds
# (fuzz/corpus/<target>/); a crash that was fixed is copied there by hand, as a regression.
# Extra libFuzzer flags: FUZZ_FLAGS="-jobs=2 -workers=2" scripts/fuzz.sh 3600.
#
# Targets run FUZZ_PARALLEL at a time (default: one a core, so two on the 2-core machine), each
# a single-threaded process. With TITAN_TEST_TIMING set to a folder (scripts/test.sh does), the
# build's and the runs' times go to its phases.tsv.
set -euo pipefail
cd "$(dirname "$0")/.."

build_only=false
if [[ ${1:-} == --build-only ]]; then
  build_only=true
  shift
fi
seconds=${1:-20}
shift || true
for tool in clang-14 clang++-14; do
  command -v "$tool" > /dev/null ||
    { echo "fuzz: error: $tool is missing: run scripts/setup.sh --tests" >&2; exit 1; }
done

record() {
  [[ -n ${TITAN_TEST_TIMING:-} ]] || return 0
  printf '%s\t%d\t%d\n' "$1" "$2" "$3" >> "$TITAN_TEST_TIMING/phases.tsv"
}

start=$SECONDS
if [[ ! -f build-fuzz/CMakeCache.txt ]]; then
  CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DTITAN_FUZZ=ON -DTITAN_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
# A tree already built (scripts/test.sh builds it beside the main tree's tests) adds no line.
if $build_only || ! ninja -C build-fuzz -n fuzz_all 2>/dev/null | grep -q "^ninja: no work to do"; then
  cmake --build build-fuzz --target fuzz_all
  record "build: build-fuzz/${TITAN_BUILD_NOTE:-}" $((SECONDS - start)) 0
fi
$build_only && exit 0

if (($# > 0)); then
  targets=("$@")
else
  targets=()
  for seeds in fuzz/corpus/*/; do targets+=("$(basename "$seeds")"); done
fi

mkdir -p build-fuzz/artifacts build-fuzz/logs
parallel=${FUZZ_PARALLEL:-$(nproc)}

# fuzz_one TARGET: one target from its seeds for SECONDS; its verdict in build-fuzz/logs/TARGET.verdict.
fuzz_one() {
  local target=$1 log=build-fuzz/logs/$1.log verdict=build-fuzz/logs/$1.verdict
  mkdir -p "build-fuzz/corpus/$target"
  # A target reading JSON has a dictionary of its tokens and keys (fuzz/dict/TARGET.dict).
  local dict=()
  [[ -f fuzz/dict/$target.dict ]] && dict=(-dict="fuzz/dict/$target.dict")
  # -timeout: one input taking 10 s is a hang. -malloc_limit_mb: no reader of an input of at
  # most -max_len bytes needs a 256 MiB allocation; one that asks for it sized it from an
  # unchecked field. -rss_limit_mb: the same for the process as a whole.
  if UBSAN_OPTIONS=print_stacktrace=1 "build-fuzz/fuzz/$target" \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=256 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$target-" \
      "${dict[@]}" ${FUZZ_FLAGS:-} "build-fuzz/corpus/$target" "fuzz/corpus/$target" >"$log" 2>&1; then
    local runs speed cov
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    echo "fuzz: $target: ok, ${runs:-?} runs in ${seconds} s (${speed:-?}/s), ${cov:-cov: ?}" > "$verdict"
  else
    {
      echo "fuzz: $target: FAILED (the log's end follows; full log $log)"
      grep -E 'fuzz contract|ERROR: |SUMMARY|runtime error|Test unit written' "$log" | head -20 || true
      tail -n 40 "$log"
    } > "$verdict"
    return 1
  fi
}

start=$SECONDS
rm -f build-fuzz/logs/*.verdict
running=0
for target in "${targets[@]}"; do
  if ((running >= parallel)); then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$target" &
  running=$((running + 1))
done
wait || true

status=0
for target in "${targets[@]}"; do
  if grep -q ": ok," "build-fuzz/logs/$target.verdict" 2>/dev/null; then
    cat "build-fuzz/logs/$target.verdict"
  else
    cat "build-fuzz/logs/$target.verdict" 2>/dev/null || echo "fuzz: $target: FAILED (it left no verdict)"
    status=1
  fi
done
record "fuzz: build-fuzz/ ${#targets[@]} targets, $seconds s each, $parallel at a time${TITAN_FUZZ_NOTE:-}" \
  $((SECONDS - start)) "$status"
exit "$status"
